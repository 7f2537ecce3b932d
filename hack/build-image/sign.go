package main

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The signature is cosign's, so that `cosign verify --key` reads it once pushed: a
// "simple signing" payload naming the repository and the index digest, signed with ECDSA
// P-256 over its SHA-256, base64 in the layer's annotation. In the layout it is a referrer
// of the index (subject), named sha256-<hex>.sig as cosign tags it in a registry.
const (
	SignatureArtifactType types.MediaType = "application/vnd.dev.cosign.artifact.sig.v1+json"
	SimpleSigningType     types.MediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	SignatureAnnotation                   = "dev.cosignproject.cosign/signature"
)

type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]string `json:"optional"`
}

// imageIndex is the layout's one image index and its descriptor.
func imageIndex(lp layout.Path) (v1.ImageIndex, v1.Descriptor, error) {
	top, err := lp.ImageIndex()
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	var found []v1.Descriptor
	for _, d := range m.Manifests {
		if d.MediaType.IsIndex() {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return nil, v1.Descriptor{}, fmt.Errorf("%d image indexes in the layout, want one", len(found))
	}
	return top, found[0], nil
}

// signLayout adds a signature of the layout's image index, by the PKCS#8 ECDSA P-256 key in
// keyFile, for repository repo.
func signLayout(oci, keyFile, repo string) error {
	data, err := os.ReadFile(keyFile)
	if err != nil {
		return err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return fmt.Errorf("%s: want a PEM \"PRIVATE KEY\" (PKCS#8, unencrypted), e.g. openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return fmt.Errorf("%s: %w", keyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return fmt.Errorf("%s: a %T, want an ECDSA key", keyFile, k)
	}
	lp, err := layout.FromPath(oci)
	if err != nil {
		return err
	}
	_, desc, err := imageIndex(lp)
	if err != nil {
		return fmt.Errorf("%s: %w", oci, err)
	}
	var p simpleSigning
	p.Critical.Identity.DockerReference = repo
	p.Critical.Image.DockerManifestDigest = desc.Digest.String()
	p.Critical.Type = "cosign container image signature"
	payload, err := json.Marshal(p)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		return err
	}
	art, err := artifact(SignatureArtifactType, SimpleSigningType, payload,
		map[string]string{SignatureAnnotation: base64.StdEncoding.EncodeToString(sig)},
		v1.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size})
	if err != nil {
		return err
	}
	name := strings.Replace(desc.Digest.String(), ":", "-", 1) + ".sig"
	if err := lp.AppendImage(art, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": name})); err != nil {
		return err
	}
	fmt.Printf("%s: signed index %s for %s (%s)\n", oci, desc.Digest, repo, name)
	return nil
}

// verifyLayout checks that a signature in the layout, by the key of the PEM public key in
// pubFile, covers the layout's image index for repository repo. It returns the index digest.
func verifyLayout(oci, pubFile, repo string) (v1.Hash, error) {
	data, err := os.ReadFile(pubFile)
	if err != nil {
		return v1.Hash{}, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PUBLIC KEY" {
		return v1.Hash{}, fmt.Errorf("%s: want a PEM \"PUBLIC KEY\"", pubFile)
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("%s: %w", pubFile, err)
	}
	pub, ok := k.(*ecdsa.PublicKey)
	if !ok {
		return v1.Hash{}, fmt.Errorf("%s: a %T, want an ECDSA key", pubFile, k)
	}
	lp, err := layout.FromPath(oci)
	if err != nil {
		return v1.Hash{}, err
	}
	top, desc, err := imageIndex(lp)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("%s: %w", oci, err)
	}
	// The index's digest is recomputed from its bytes: a layout whose index.json was
	// pointed at another index, or whose index blob was replaced, does not match.
	idx, err := top.ImageIndex(desc.Digest)
	if err != nil {
		return v1.Hash{}, err
	}
	if got, err := idx.Digest(); err != nil || got != desc.Digest {
		return v1.Hash{}, fmt.Errorf("%s: the index blob's digest is %s, index.json says %s (%v)", oci, got, desc.Digest, err)
	}
	m, _ := top.IndexManifest()
	var problems []string
	for _, d := range m.Manifests {
		if d.MediaType.IsIndex() {
			continue
		}
		art, err := top.Image(d.Digest)
		if err != nil {
			return v1.Hash{}, err
		}
		am, err := art.Manifest()
		if err != nil || am.Config.MediaType != SignatureArtifactType || am.Subject == nil || am.Subject.Digest != desc.Digest || len(am.Layers) != 1 {
			continue
		}
		layers, _ := art.Layers()
		rc, err := layers[0].Uncompressed()
		if err != nil {
			return v1.Hash{}, err
		}
		payload, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return v1.Hash{}, err
		}
		sig, err := base64.StdEncoding.DecodeString(am.Layers[0].Annotations[SignatureAnnotation])
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: signature annotation: %v", d.Digest, err))
			continue
		}
		sum := sha256.Sum256(payload)
		if !ecdsa.VerifyASN1(pub, sum[:], sig) {
			problems = append(problems, fmt.Sprintf("%s: not signed by %s", d.Digest, pubFile))
			continue
		}
		var p simpleSigning
		if err := json.Unmarshal(payload, &p); err != nil {
			problems = append(problems, fmt.Sprintf("%s: payload: %v", d.Digest, err))
			continue
		}
		if p.Critical.Image.DockerManifestDigest != desc.Digest.String() || p.Critical.Identity.DockerReference != repo {
			problems = append(problems, fmt.Sprintf("%s: signs %s of %s, want %s of %s", d.Digest,
				p.Critical.Image.DockerManifestDigest, p.Critical.Identity.DockerReference, desc.Digest, repo))
			continue
		}
		return desc.Digest, nil
	}
	if len(problems) == 0 {
		problems = append(problems, "no signature of the index in the layout")
	}
	return v1.Hash{}, fmt.Errorf("%s: index %s: %s", oci, desc.Digest, strings.Join(problems, "; "))
}
