package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cubby-dev/cubby/internal/agentapi"
)

// securedAgent answers an agent's port as a secured agent does: every request
// but GET /health must carry the token it holds, and /init replaces that token
// with the one it carries. It records every credential it was sent.
type securedAgent struct {
	mu    sync.Mutex
	token string
	sent  []string
}

func (a *securedAgent) serve(t *testing.T, addr netip.Addr) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /init", func(w http.ResponseWriter, r *http.Request) {
		var req agentapi.InitRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		got := r.Header.Get("X-Access-Token")
		a.sent = append(a.sent, got)
		if got != a.token {
			http.Error(w, `{"code":401,"message":"invalid access token"}`, http.StatusUnauthorized)
			return
		}
		if req.AccessToken != "" {
			a.token = req.AccessToken
		}
		w.WriteHeader(http.StatusNoContent)
	})
	serveAgent(t, addr, mux)
}

func (a *securedAgent) state() (string, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.token, slices.Clone(a.sent)
}

// runPod creates sandbox id's claimed Pod as a replica of this release does
// (marked) or, with old, as one of the previous release did (no AnnLink), and
// runs it at a fresh loopback IP with agent answering its port.
func runPod(t *testing.T, b *Backend, id string, old bool, agent *securedAgent) {
	t.Helper()
	c := api.c
	pod, err := b.podFor(request(id), StateClaimed)
	if err != nil {
		t.Fatal(err)
	}
	if old {
		delete(pod.Annotations, AnnLink)
	}
	if _, err := c.Client.CoreV1().Pods(b.cfg.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := time.Now().Nanosecond()
	ip := netip.MustParseAddr(fmt.Sprintf("127.%d.%d.%d", 200+n%50, n/1000%250, 1+n/250000%250))
	agent.serve(t, ip)
	markRunning(t, c, b.cfg.Namespace, pod.Name, ip)
	eventually(t, 30*time.Second, "pod running in the cache", func() bool {
		_, err := b.Lookup(context.Background(), id)
		return err == nil
	})
}

// TestRekeyOldPod: the agent of a Pod an older replica initialised holds the
// clients' token and refuses the link credential; Rekey gives it the link
// credential (authenticated with the token, once) and marks the Pod; a second
// Rekey sends nothing.
func TestRekeyOldPod(t *testing.T) {
	c := cluster(t)
	b := newBackend(t, c, c.Namespace(t), nil)
	const id, raw = "rekeyold000000000001", "client-access-token"
	agent := &securedAgent{token: raw}
	runPod(t, b, id, true, agent)
	ctx := context.Background()
	if done, err := b.Rekey(ctx, id, raw); err != nil || !done {
		t.Fatalf("rekey of an old pod: %v, %v", done, err)
	}
	token, sent := agent.state()
	if token != agentapi.LinkToken(raw) || !slices.Equal(sent, []string{raw}) {
		t.Fatalf("agent holds %q after credentials %q", token, sent)
	}
	pod, err := c.Client.CoreV1().Pods(b.cfg.Namespace).Get(ctx, podName(id), metav1.GetOptions{})
	if err != nil || !linked(pod) {
		t.Fatalf("pod not marked after the re-key: %v %v", pod.Annotations, err)
	}
	eventually(t, 30*time.Second, "the mark in the cache", func() bool {
		p, err := b.pods.Get(podName(id))
		return err == nil && linked(p)
	})
	if done, err := b.Rekey(ctx, id, raw); err != nil || done {
		t.Fatalf("second rekey: %v, %v", done, err)
	}
	if _, sent := agent.state(); len(sent) != 1 {
		t.Fatalf("a marked pod was sent credentials again: %q", sent)
	}
}

// TestRekeyMarkedPod: a Pod this release created is never sent the clients'
// token, even when its agent would refuse the link credential.
func TestRekeyMarkedPod(t *testing.T) {
	c := cluster(t)
	b := newBackend(t, c, c.Namespace(t), nil)
	const id, raw = "rekeymarked000000001", "client-access-token"
	agent := &securedAgent{token: "something-else"}
	runPod(t, b, id, false, agent)
	if done, err := b.Rekey(context.Background(), id, raw); err != nil || done {
		t.Fatalf("rekey of a marked pod: %v, %v", done, err)
	}
	if _, sent := agent.state(); len(sent) != 0 {
		t.Fatalf("a marked pod was sent %q", sent)
	}
}

// TestRekeyUnmarkedLinked: a Pod whose agent was re-keyed but whose mark was
// not written (the replica died in between) refuses the token; the link
// credential it accepts proves the re-key, and the Pod is marked.
func TestRekeyUnmarkedLinked(t *testing.T) {
	c := cluster(t)
	b := newBackend(t, c, c.Namespace(t), nil)
	const id, raw = "rekeylinked000000001", "client-access-token"
	agent := &securedAgent{token: agentapi.LinkToken(raw)}
	runPod(t, b, id, true, agent)
	ctx := context.Background()
	if done, err := b.Rekey(ctx, id, raw); err != nil || !done {
		t.Fatalf("rekey: %v, %v", done, err)
	}
	if _, err := b.Rekey(ctx, "rekeymissing00000001", raw); err == nil {
		t.Fatal("rekey of a sandbox without a pod succeeded")
	}
	wrong := &securedAgent{token: "another-token"}
	runPod(t, b, "rekeywrong0000000001", true, wrong)
	if _, err := b.Rekey(ctx, "rekeywrong0000000001", raw); err == nil {
		t.Fatal("rekey of an agent that refuses both credentials succeeded")
	}
	pod, err := c.Client.CoreV1().Pods(b.cfg.Namespace).Get(ctx, podName("rekeywrong0000000001"), metav1.GetOptions{})
	if err != nil || linked(pod) {
		t.Fatalf("a pod whose agent refused the re-key is marked: %v %v", pod.Annotations, err)
	}
}
