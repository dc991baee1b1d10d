// Package testregistry starts a real OCI registry for tests: the CNCF
// distribution registry, built from the pinned tools module tools/registry
// (cached by the content of its go.mod and go.sum under
// <repo>/.cache/tools) and started on a free loopback port, optionally
// behind htpasswd authentication. It also pushes test images to it with
// go-containerregistry.
package testregistry

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Registry is one running registry process.
type Registry struct {
	Addr     string // 127.0.0.1:port (plain HTTP)
	Username string // "" when started without authentication
	Password string
	dir      string
	ownDir   bool // Stop removes dir
	cmd      *exec.Cmd
	done     chan struct{}
}

// Options tune Start.
type Options struct {
	// Username and Password, when set, require htpasswd basic authentication.
	Username, Password string
	// Dir holds the registry's storage and config; "" = a new temporary
	// directory removed by Stop.
	Dir string
}

// Binary returns the path of the registry binary, building it from
// tools/registry under repo when the cached build is missing. Concurrent
// callers share one build.
func Binary(repo string) (string, error) {
	sum := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(repo, "tools", "registry", f))
		if err != nil {
			return "", fmt.Errorf("registry tools module: %w", err)
		}
		sum.Write(b)
	}
	bin := filepath.Join(repo, ".cache", "tools", "registry-"+hex.EncodeToString(sum.Sum(nil))[:16])
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	tmp := bin + ".tmp-" + strconv.Itoa(os.Getpid())
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, "github.com/distribution/distribution/v3/cmd/registry")
	cmd.Dir = filepath.Join(repo, "tools", "registry")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("build registry: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// Start builds (if needed) and starts a registry, waiting until it answers.
// Call Stop when done.
func Start(repo string, opts Options) (*Registry, error) {
	bin, err := Binary(repo)
	if err != nil {
		return nil, err
	}
	dir, own := opts.Dir, opts.Dir == ""
	if own {
		if dir, err = os.MkdirTemp("", "cubby-registry-"); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &Registry{Addr: "127.0.0.1:" + strconv.Itoa(port), Username: opts.Username, Password: opts.Password, dir: dir, ownDir: own, done: make(chan struct{})}
	cfg, err := r.writeConfig()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		return nil, err
	}
	r.cmd = exec.Command(bin, "serve", cfg)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start registry: %w", err)
	}
	go func() { r.cmd.Wait(); logf.Close(); close(r.done) }()
	if err := r.waitReady(30 * time.Second); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// writeConfig writes the registry's config (and htpasswd) into its dir.
func (r *Registry) writeConfig() (string, error) {
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n  secret: cubby-test\n",
		filepath.Join(r.dir, "data"), r.Addr)
	if r.Username != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.MinCost)
		if err != nil {
			return "", err
		}
		htpasswd := filepath.Join(r.dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(r.Username+":"+string(hash)+"\n"), 0o600); err != nil {
			return "", err
		}
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: cubby-test\n    path: %s\n", htpasswd)
	}
	path := filepath.Join(r.dir, "config.yml")
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

func (r *Registry) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-r.done:
			log, _ := os.ReadFile(filepath.Join(r.dir, "registry.log"))
			return fmt.Errorf("registry exited: %s", log)
		default:
		}
		resp, err := http.Get("http://" + r.Addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("registry did not answer within " + limit.String())
}

// Stop kills the registry and removes its directory when Start created it.
func (r *Registry) Stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	if r.ownDir {
		_ = os.RemoveAll(r.dir)
	}
}

// Log returns the registry's log.
func (r *Registry) Log() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "registry.log"))
	return string(b)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
