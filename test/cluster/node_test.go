package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/ociimage"
	"github.com/cubby-dev/cubby/internal/template"
	"github.com/cubby-dev/cubby/internal/testenv/testkube"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// The tests of this file run on TierNode: a real kubelet, containerd, runc
// and CNI bridge in a network namespace of their own. Sandboxes are real
// Pods running the template images exported from the built templates
// (CUBBY_TEMPLATES_DIR) with the agent of CUBBY_BIN baked in.

// nodeTemplates are the templates the node tier exports and loads.
var nodeTemplates = []string{"base", "code-interpreter"}

// loaded holds the images loaded into the shared node's containerd.
var loaded struct {
	once sync.Once
	refs map[string]string
	err  error
}

// nodeImages exports the templates as images (the template layers cached in
// <repo>/.cache/k8s-layers), loads them into c's node and returns their
// references by template name.
func nodeImages(t testing.TB, c *testkube.Cluster) map[string]string {
	t.Helper()
	loaded.once.Do(func() { loaded.refs, loaded.err = exportTemplates(c) })
	if loaded.err != nil {
		t.Fatal(loaded.err)
	}
	return loaded.refs
}

func exportTemplates(c *testkube.Cluster) (map[string]string, error) {
	root, err := testserver.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir := os.Getenv("CUBBY_TEMPLATES_DIR")
	if dir == "" {
		dir = filepath.Join(root, ".cache", "templates")
	}
	m, err := template.NewManager(dir, nil)
	if err != nil {
		return nil, err
	}
	refs := map[string]string{}
	for _, name := range nodeTemplates {
		info, err := m.Get(name)
		if err != nil {
			return nil, err
		}
		began := time.Now()
		img, cleanup, err := ociimage.Build(context.Background(), ociimage.Spec{
			RootfsDir: info.RootfsDir, AgentBinary: os.Getenv("CUBBY_BIN"), TemplateID: info.ID, Name: info.Name,
			Digest: info.Digest, WorkDir: c.Dir, LayerCache: filepath.Join(root, ".cache", "k8s-layers"),
		})
		if err != nil {
			return nil, err
		}
		ref := ociimage.LocalRef(name, info.Digest)
		archive := filepath.Join(c.Dir, name+".tar")
		err = ociimage.WriteArchive(archive, ref, img)
		cleanup()
		if err == nil {
			err = c.ImportImage(archive)
		}
		_ = os.Remove(archive)
		if err != nil {
			return nil, err
		}
		logf("template %s exported and loaded as %s in %s", name, ref, time.Since(began).Round(time.Second))
		refs[name] = ref
	}
	return refs, nil
}

// logf prints progress of the shared setup (no test owns it).
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cluster: "+format+"\n", args...)
}

// nodeFleet starts n replicas on the node tier with the template images.
func nodeFleet(t testing.TB, n int, args ...string) *fleet {
	t.Helper()
	c := clusterOf(t, testkube.TierNode)
	refs := nodeImages(t, c)
	return newFleet(t, c, n, refs, append([]string{"--user-namespaces=false", "--image-pull-policy", "Never",
		"--pending-timeout", "3m"}, args...)...)
}

// conn is the SDK connection to replica i of f.
func (f *fleet) conn(i int) sdk.ConnectionOptions {
	url := f.replicas[i].URL("")
	return sdk.ConnectionOptions{APIKey: f.key, APIURL: url, SandboxURL: url, RequestTimeout: 3 * time.Minute}
}

// TestNodeSandboxThroughEitherReplica: a real sandbox Pod created through
// one replica runs commands and serves files through both; it is killed
// through the second.
func TestNodeSandboxThroughEitherReplica(t *testing.T) {
	f := nodeFleet(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	began := time.Now()
	sbx, err := sdk.Create(ctx, &sdk.CreateOptions{ConnectionOptions: f.conn(0), Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sandbox %s created in %s", sbx.ID(), time.Since(began).Round(time.Millisecond))
	out, err := sbx.Commands.Run(ctx, "echo hello from $(hostname); id -un", nil)
	if err != nil || !strings.Contains(out.Stdout, "hello from "+sbx.ID()) || !strings.Contains(out.Stdout, "user") {
		t.Fatalf("command: %+v, %v", out, err)
	}
	other, err := sdk.Connect(ctx, sbx.ID(), &sdk.ConnectOptions{ConnectionOptions: f.conn(1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Files.Write(ctx, "/home/user/note.txt", []byte("written through replica 1"), nil); err != nil {
		t.Fatal(err)
	}
	data, err := sbx.Files.Read(ctx, "/home/user/note.txt", nil)
	if err != nil || string(data) != "written through replica 1" {
		t.Fatalf("read through replica 0: %q, %v", data, err)
	}
	if err := other.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sbx.Commands.Run(ctx, "true", nil); err == nil {
		t.Fatal("a killed sandbox still runs commands")
	}
	var nf *sdk.NotFoundError
	if _, err := sbx.GetInfo(ctx); !errors.As(err, &nf) {
		t.Fatalf("info of a killed sandbox: %v", err)
	}
}
