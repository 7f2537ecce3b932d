//go:build integration

package containerd_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/evictiond/evictiond/internal/testenv/containerd"
	"github.com/evictiond/evictiond/internal/testenv/images"
)

// TestImportedImagesAreListedByTheCRI proves the private containerd starts, answers the CRI,
// and sees images built by the images package, under the reference and ID it reports.
func TestImportedImagesAreListedByTheCRI(t *testing.T) {
	ctrd := containerd.Start(t, containerd.Options{RootTmpfsBytes: 256 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	spec, err := images.Busybox("example.test/smoke:v1", "/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	spec.Files = append(spec.Files, images.Padding("/pad", 1<<20, "smoke"))
	built, err := images.Import(ctx, ctrd.Socket, containerd.CRINamespace, spec)
	if err != nil {
		t.Fatal(err)
	}

	conn, err := grpc.NewClient(ctrd.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	list, err := runtimeapi.NewImageServiceClient(conn).ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatalf("ListImages: %v", err)
	}
	for _, img := range list.Images {
		if img.Id == built.ID {
			if len(img.RepoTags) != 1 || img.RepoTags[0] != spec.Ref {
				t.Errorf("image %s tags = %v, want [%s]", img.Id, img.RepoTags, spec.Ref)
			}
			if img.Size < 1<<20 {
				t.Errorf("image size = %d, want at least the 1 MiB padding", img.Size)
			}
			return
		}
	}
	t.Fatalf("image %s (%s) not listed by the CRI; listed: %v", built.ID, spec.Ref, list.Images)
}
