package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func writeKeyPair(t *testing.T, dir, name string) (priv, pub string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p8, _ := x509.MarshalPKCS8PrivateKey(k)
	pk, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	priv, pub = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600)
	os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pk}), 0o644)
	return priv, pub
}

// testLayout builds a one-platform index (a small "binary" that is this test's own ELF
// executable) into a new OCI layout and returns its directory.
func testLayout(t *testing.T, dir, version string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	oci := filepath.Join(dir, "layout-"+version)
	var p platformFlag
	if err := p.Set("linux/" + runtime.GOARCH + "=" + exe); err != nil {
		t.Fatal(err)
	}
	if err := run(p, "evictiond.io/evictiond:dev", "", oci, version, "rev", "src", false); err != nil {
		t.Fatal(err)
	}
	return oci
}

func TestSignedIndexVerifiesWithItsKeyOnly(t *testing.T) {
	dir := t.TempDir()
	priv, pub := writeKeyPair(t, dir, "release")
	_, otherPub := writeKeyPair(t, dir, "other")
	oci := testLayout(t, dir, "v1")

	if _, err := verifyLayout(oci, pub, "evictiond.io/evictiond"); err == nil || !strings.Contains(err.Error(), "no signature") {
		t.Errorf("unsigned layout: err = %v, want no signature", err)
	}
	if err := signLayout(oci, priv, "evictiond.io/evictiond"); err != nil {
		t.Fatal(err)
	}
	digest, err := verifyLayout(oci, pub, "evictiond.io/evictiond")
	if err != nil {
		t.Fatalf("verify with the signing key's public key: %v", err)
	}
	lp, _ := layout.FromPath(oci)
	if _, desc, _ := imageIndex(lp); desc.Digest != digest {
		t.Errorf("verified %s, the layout's index is %s", digest, desc.Digest)
	}
	if _, err := verifyLayout(oci, otherPub, "evictiond.io/evictiond"); err == nil || !strings.Contains(err.Error(), "not signed by") {
		t.Errorf("another key: err = %v, want not signed by", err)
	}
	if _, err := verifyLayout(oci, pub, "example.com/other"); err == nil || !strings.Contains(err.Error(), "want") {
		t.Errorf("another repository: err = %v, want a mismatch", err)
	}

	// The signature moved to another build's layout (another index) does not verify it.
	other := testLayout(t, dir, "v2")
	copySignature(t, oci, other)
	if _, err := verifyLayout(other, pub, "evictiond.io/evictiond"); err == nil {
		t.Error("a signature of another index verified this one")
	}
}

// copySignature adds from's signature entries of index.json (and their blobs) to to.
func copySignature(t *testing.T, from, to string) {
	t.Helper()
	read := func(dir string) map[string]any {
		var m map[string]any
		data, _ := os.ReadFile(filepath.Join(dir, "index.json"))
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	src, dst := read(from), read(to)
	for _, e := range src["manifests"].([]any) {
		if !strings.HasSuffix(e.(map[string]any)["annotations"].(map[string]any)["org.opencontainers.image.ref.name"].(string), ".sig") {
			continue
		}
		dst["manifests"] = append(dst["manifests"].([]any), e)
	}
	blobs, _ := filepath.Glob(filepath.Join(from, "blobs", "sha256", "*"))
	for _, b := range blobs {
		data, _ := os.ReadFile(b)
		os.WriteFile(filepath.Join(to, "blobs", "sha256", filepath.Base(b)), data, 0o644)
	}
	data, _ := json.Marshal(dst)
	os.WriteFile(filepath.Join(to, "index.json"), data, 0o644)
}
