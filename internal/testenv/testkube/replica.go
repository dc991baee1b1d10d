package testkube

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Replica is one `cubby serve --backend kubernetes` process (CUBBY_BIN).
type Replica struct {
	Name string
	Addr string // host:port of its API and gateway
	Key  string // CUBBY_API_KEY it accepts
	args []string
	dir  string
	p    *proc
	c    *Cluster
	env  []string
}

// ReplicaOptions configure StartReplica.
type ReplicaOptions struct {
	Namespace  string
	Store      string            // postgres:// DSN
	Key        string            // CUBBY_API_KEY
	Images     map[string]string // --template-image NAME=IMAGE
	Kubeconfig string            // default the administrator's
	Args       []string          // more serve flags
	Prefix     []string          // a command the replica runs under (nsenter)
}

// StartReplica starts a replica named name and waits for its /health.
func (c *Cluster) StartReplica(name string, o ReplicaOptions) (*Replica, error) {
	bin := os.Getenv("CUBBY_BIN")
	if bin == "" {
		return nil, fmt.Errorf("CUBBY_BIN not set")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	if o.Kubeconfig == "" {
		o.Kubeconfig = c.Kubeconfig
	}
	r := &Replica{Name: name, Addr: fmt.Sprintf("127.0.0.1:%d", port), Key: o.Key, c: c,
		dir: filepath.Join(c.Dir, "replica-"+name), env: append(os.Environ(), "CUBBY_API_KEY="+o.Key, "POD_NAME="+name)}
	r.args = []string{"serve", "--backend", "kubernetes", "--store", o.Store, "--kubeconfig", o.Kubeconfig,
		"--namespace", o.Namespace, "--listen", r.Addr, "--data-dir", r.dir, "--identity", name,
		"--lease-duration", "4s", "--lease-renew-deadline", "3s", "--lease-retry-period", "500ms"}
	for k, v := range o.Images {
		r.args = append(r.args, "--template-image", k+"="+v)
	}
	r.args = append(r.args, o.Args...)
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, err
	}
	return r, r.start(bin, o.Prefix)
}

func (r *Replica) start(bin string, prefix []string) error {
	p, err := start(r.c.Dir, "replica-"+r.Name, prefix, r.env, bin, r.args...)
	if err != nil {
		return err
	}
	r.p = p
	r.c.mu.Lock()
	r.c.procs = append(r.c.procs, p)
	r.c.mu.Unlock()
	return r.WaitHealth(http.StatusOK)
}

// WaitHealth waits until GET /health answers status.
func (r *Replica) WaitHealth(status int) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for ctx.Err() == nil {
		if r.p.exited() {
			return fmt.Errorf("replica %s exited: %s", r.Name, r.p.tail(4000))
		}
		if r.Health() == status {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("replica %s /health never answered %d: %s", r.Name, status, r.p.tail(4000))
}

// Health returns the status of GET /health (0 when it does not answer).
func (r *Replica) Health() int {
	resp, err := http.Get("http://" + r.Addr + "/health")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Kill9 kills the replica at once (SIGKILL), as a lost node would.
func (r *Replica) Kill9() { r.p.kill() }

// Log returns the tail of the replica's log.
func (r *Replica) Log() string { return r.p.tail(8000) }

// URL returns the replica's URL of path.
func (r *Replica) URL(path string) string { return "http://" + r.Addr + path }
