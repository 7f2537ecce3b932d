package vm

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readNewc parses a newc archive back: name -> (mode, data).
func readNewc(t *testing.T, b []byte) map[string]struct {
	mode uint64
	data string
} {
	t.Helper()
	out := map[string]struct {
		mode uint64
		data string
	}{}
	pad := func(n int) int { return (n + 3) &^ 3 }
	for off := 0; off < len(b); {
		h := string(b[off : off+110])
		if !strings.HasPrefix(h, "070701") {
			t.Fatalf("bad magic at %d: %q", off, h[:6])
		}
		field := func(i int) uint64 {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		mode, size, namesize := field(1), int(field(6)), int(field(11))
		name := string(b[off+110 : off+110+namesize-1])
		off = pad(off + 110 + namesize)
		data := string(b[off : off+size])
		off = pad(off + size)
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out[name] = struct {
			mode uint64
			data string
		}{mode, data}
	}
	t.Fatal("no trailer")
	return nil
}

func TestCPIOWritesNewcWithParentsOnce(t *testing.T) {
	var buf bytes.Buffer
	c := newCPIOWriter(&buf)
	c.File("/bin/tool", 0o755, []byte("abcde"))
	c.File("bin/other", 0o644, []byte("xyz"))
	c.Symlink("bin/sh", "busybox")
	c.CharDev("dev/console", 5, 1)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := readNewc(t, buf.Bytes())
	for name, want := range map[string]struct {
		mode uint64
		data string
	}{
		"bin": {cpioDir | 0o755, ""}, "bin/tool": {cpioRegular | 0o755, "abcde"}, "bin/other": {cpioRegular | 0o644, "xyz"},
		"bin/sh": {cpioSymlink | 0o777, "busybox"}, "dev": {cpioDir | 0o755, ""}, "dev/console": {cpioCharDev | 0o600, ""},
	} {
		if got[name] != want {
			t.Errorf("%s: %+v, want %+v", name, got[name], want)
		}
	}
	if len(got) != 6 {
		t.Errorf("entries %v, want 6 (each directory once)", got)
	}
}

func TestParseMarkersAndSuites(t *testing.T) {
	out := []byte("EVICTIOND-VM-UP 3.25\n" +
		"EVICTIOND-VM-SUITE-BEGIN a\n" +
		"=== RUN   TestOne\n--- PASS: TestOne (0.01s)\n=== RUN   TestTwo\n    x_test.go:1: boom\n--- FAIL: TestTwo (0.02s)\nFAIL\n" +
		"EVICTIOND-VM-SUITE-END a 1\n" +
		"EVICTIOND-VM-SUITE-BEGIN b\n=== RUN   TestThree\n" + // the VM stopped mid-suite
		"EVICTIOND-VM-EXIT 1\n")
	status, boot, ok := parseMarkers(out)
	if !ok || status != 1 || boot != 3250*time.Millisecond {
		t.Fatalf("markers: status %d boot %v ok %v", status, boot, ok)
	}
	suites := []*Suite{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	res, err := ParseSuites(context.Background(), out, suites)
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]string{}
	for _, ev := range res["a"].Events {
		if ev.Test != "" && (ev.Action == "pass" || ev.Action == "fail") {
			results[ev.Test] = ev.Action
		}
	}
	if results["TestOne"] != "pass" || results["TestTwo"] != "fail" || res["a"].ExitStatus != 1 {
		t.Errorf("suite a: %v, exit %d", results, res["a"].ExitStatus)
	}
	if res["b"] == nil || res["b"].ExitStatus != -1 {
		t.Errorf("suite b without its end marker: %+v, want exit -1", res["b"])
	}
	if res["c"] != nil {
		t.Errorf("suite c never began but has a result: %+v", res["c"])
	}
}
