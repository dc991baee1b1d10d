package cluster

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend/kube"
	"github.com/cubby-dev/cubby/internal/gateway"
	"github.com/cubby-dev/cubby/internal/testenv/testkube"
)

// TestRollingUpgradeRekeys: a sandbox Pod a replica of the previous release
// initialised (no link mark, its agent holds the clients' access token and
// refuses the link credential) becomes reachable through the gateway once a
// replica of this release starts: it gets its link credential in one /init
// authenticated with the token, and the Pod is marked. A Pod this release
// initialised is never sent a client token.
func TestRollingUpgradeRekeys(t *testing.T) {
	c := clusterOf(t, testkube.TierSimulated)
	f := newFleet(t, c, 1, simImages)
	s := c.ServeStandIns(t, f.ns)
	s.Secure()
	oldID, oldToken := f.createSecure(f.replicas[0])
	newID, newToken := f.createSecure(f.replicas[0])
	if got := f.viaGateway(f.replicas[0], newID, newToken); got != http.StatusOK {
		t.Fatalf("a sandbox of this release through the gateway: %d", got)
	}
	f.replicas[0].Kill9()

	// What the previous release leaves: no mark, an agent holding the token.
	ctx := context.Background()
	patch := []byte(`{"metadata":{"annotations":{"` + kube.AnnLink + `":null}}}`)
	if _, err := c.Client.CoreV1().Pods(f.ns).Patch(ctx, kube.PodPrefix+oldID, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	oldIP, newIP := f.podIP(oldID), f.podIP(newID)
	s.SetToken(oldIP, oldToken)
	s.SetToken(newIP, agentapi.LinkToken(newToken))

	r := f.add("replica-1")
	eventually(t, time.Minute, "the old sandbox reachable through the new replica", func() bool {
		return f.viaGateway(r, oldID, oldToken) == http.StatusOK
	})
	if got := f.viaGateway(r, newID, newToken); got != http.StatusOK {
		t.Fatalf("the sandbox of this release through the new replica: %d", got)
	}
	if s.Token(oldIP) != agentapi.LinkToken(oldToken) {
		t.Fatal("the old agent does not hold its link credential")
	}
	if n := count(s.Sent(oldIP), oldToken); n != 1 {
		t.Fatalf("the old agent got the clients' token %d times, want once (the re-key): %q", n, s.Sent(oldIP))
	}
	if n := count(s.Sent(newIP), newToken); n != 0 {
		t.Fatalf("a pod of this release was sent the clients' token: %q", s.Sent(newIP))
	}
	pod, err := c.Client.CoreV1().Pods(f.ns).Get(ctx, kube.PodPrefix+oldID, metav1.GetOptions{})
	if err != nil || pod.Annotations[kube.AnnLink] != "true" {
		t.Fatalf("the re-keyed pod is not marked: %v %v", pod.Annotations, err)
	}
}

func count(list []string, v string) int {
	n := 0
	for _, s := range list {
		if s == v {
			n++
		}
	}
	return n
}

// createSecure creates a secured sandbox of base through r and returns its ID
// and envd access token.
func (f *fleet) createSecure(r *testkube.Replica) (string, string) {
	f.t.Helper()
	var out struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	body := map[string]any{"templateID": "base", "secure": true, "timeout": 600}
	if status := f.call(r, http.MethodPost, "/v2/sandboxes", body, &out); status != http.StatusCreated || out.EnvdAccessToken == "" {
		f.t.Fatalf("create a secured sandbox: %d %+v", status, out)
	}
	return out.SandboxID, out.EnvdAccessToken
}

// podIP returns the IP of sandbox id's Pod.
func (f *fleet) podIP(id string) netip.Addr {
	f.t.Helper()
	pod, err := f.c.Client.CoreV1().Pods(f.ns).Get(context.Background(), kube.PodPrefix+id, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		f.t.Fatal(err)
	}
	return ip
}

// viaGateway sends GET /envs to sandbox id's envd through r's gateway with
// the clients' access token and returns the status.
func (f *fleet) viaGateway(r *testkube.Replica, id, token string) int {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodGet, r.URL("/envs"), nil)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set(gateway.HeaderSandboxID, id)
	req.Header.Set(gateway.HeaderSandboxPort, strconv.Itoa(agentapi.EnvdPort))
	req.Header.Set("X-Access-Token", token)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
