// Command build-image writes the evictiond container image as a docker-archive
// tarball without a Docker engine: one layer holding the static binary, the
// same content as the Dockerfile's final stage (FROM scratch). `make image`
// runs it; `ctr images import` or `docker load` read the result.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/evictiond/evictiond/internal/testenv/images"
)

func main() {
	binary := flag.String("binary", "bin/evictiond", "static evictiond binary")
	ref := flag.String("ref", "evictiond.io/evictiond:dev", "image reference")
	out := flag.String("o", "bin/evictiond-image.tar", "output docker-archive tarball")
	flag.Parse()
	data, err := os.ReadFile(*binary)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build-image: %v\n", err)
		os.Exit(1)
	}
	spec := images.Spec{
		Ref:        *ref,
		Files:      []images.File{{Path: "/evictiond", Data: data, Mode: 0o755}, {Path: "/tmp/.keep", Mode: 0o644}},
		Entrypoint: []string{"/evictiond"},
		Cmd:        []string{"run"},
	}
	built, err := images.WriteDockerArchiveFile(*out, spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build-image: %v\n", err)
		os.Exit(1)
	}
	st, _ := os.Stat(*out)
	fmt.Printf("%s %s %s (%d bytes)\n", *out, built.Ref, built.ID, st.Size())
}
