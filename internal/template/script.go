package template

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// stepMarker is the line prefix the customize hook prints when a build step starts;
// the progress writer turns it into a human "[k/n] …" line.
const stepMarker = "@@cubby-step "

// chrootCtx is where the hook copies the build context inside the rootfs (removed
// at the end of the hook; mmdebstrap also empties /tmp).
const chrootCtx = "/tmp/.cubby-build"

// step is one numbered build step shown in progress output.
type step struct {
	title string
}

// plan is the ordered steps of one build; step 1 is mmdebstrap itself, the last
// is committing the tree, the others run in the customize hook.
func plan(d Definition, files []resolvedFile) []step {
	steps := []step{{fmt.Sprintf("debootstrap %s (%s, %d packages)", d.Suite, d.Variant, len(d.Includes()))}}
	steps = append(steps, step{fmt.Sprintf("system setup (user %q uid %d, sudo, %d env vars, %d files)",
		DefaultUser, DefaultUID, len(d.Env), len(files))})
	if len(d.Pip) > 0 {
		steps = append(steps, step{fmt.Sprintf("pip install (%d packages)", len(d.Pip))})
	}
	if len(d.Npm) > 0 {
		steps = append(steps, step{fmt.Sprintf("npm install -g (%d packages)", len(d.Npm))})
	}
	if len(d.Run) > 0 {
		steps = append(steps, step{fmt.Sprintf("run (%d commands)", len(d.Run))})
	}
	return append(steps, step{"commit (measure, move into place)"})
}

// writeContext writes the build context into ctxDir: in/ (copied into the chroot:
// setup.sh, environment, files/N, run/N.sh) and customize.sh (run by mmdebstrap's
// customize hook on the host with the rootfs as $1). It returns customize.sh's path.
//
// hostCA, if not "", is a CA bundle file of the host copied in as in/host-ca.crt
// and named by SSL_CERT_FILE, PIP_CERT, NODE_EXTRA_CA_CERTS etc. while build steps
// run, so pip/npm/curl trust what the host trusts (e.g. a TLS-intercepting egress
// proxy). It is not part of the finished tree.
func writeContext(ctxDir string, d Definition, files []resolvedFile, hostCA string) (string, error) {
	in := filepath.Join(ctxDir, "in")
	for _, sub := range []string{"files", "run"} {
		if err := os.MkdirAll(filepath.Join(in, sub), 0o700); err != nil {
			return "", fmt.Errorf("build context: %w", err)
		}
	}
	w := map[string]string{
		"setup.sh":    setupScript(d, files),
		"environment": environmentFile(d.Env),
	}
	for i, f := range files {
		w[filepath.Join("files", fmt.Sprint(i))] = string(f.content)
	}
	for i, cmd := range d.Run {
		w[filepath.Join("run", fmt.Sprintf("%d.sh", i))] = cmd + "\n"
	}
	if hostCA != "" {
		ca, err := os.ReadFile(hostCA)
		if err != nil {
			return "", fmt.Errorf("build context: host CA bundle: %w", err)
		}
		w["host-ca.crt"] = string(ca)
	}
	for name, content := range w {
		if err := os.WriteFile(filepath.Join(in, name), []byte(content), 0o600); err != nil {
			return "", fmt.Errorf("build context: %w", err)
		}
	}
	script := filepath.Join(ctxDir, "customize.sh")
	if err := os.WriteFile(script, []byte(customizeScript(ctxDir, d, hostCA)), 0o700); err != nil {
		return "", fmt.Errorf("build context: %w", err)
	}
	return script, nil
}

// caEnvVars point TLS clients (OpenSSL, pip/requests, node, curl, git) at a CA bundle.
var caEnvVars = []string{"SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}

// customizeScript runs on the host with $1 = rootfs; every change to the tree
// happens through chroot so absolute symlinks in the tree cannot escape it.
func customizeScript(ctxDir string, d Definition, hostCA string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\nset -eu\nroot=\"$1\"\n")
	fmt.Fprintf(&b, "mkdir -p \"$root%s\"\ncp -R %s/. \"$root%s/\"\n", chrootCtx, shq(filepath.Join(ctxDir, "in")), chrootCtx)
	caEnv := ""
	if hostCA != "" {
		for _, k := range caEnvVars {
			caEnv += k + "=" + chrootCtx + "/host-ca.crt "
		}
	}
	b.WriteString("c() { chroot \"$root\" /usr/bin/env -i HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive " +
		caEnv + "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \"$@\"; }\n")
	n := 2
	marker := func() { fmt.Fprintf(&b, "echo '%s%d'\n", stepMarker, n); n++ }
	marker()
	fmt.Fprintf(&b, "c /bin/sh -eu %s/setup.sh\n", chrootCtx)
	if len(d.Pip) > 0 {
		marker()
		fmt.Fprintf(&b, "c python3 -m pip install --break-system-packages --no-cache-dir --root-user-action=ignore "+
			"--disable-pip-version-check --no-input --progress-bar off %s\n", shqAll(d.Pip))
	}
	if len(d.Npm) > 0 {
		marker()
		fmt.Fprintf(&b, "c npm install -g --no-fund --no-audit --no-update-notifier %s\n", shqAll(d.Npm))
	}
	if len(d.Run) > 0 {
		marker()
		env := shqAll(envPairs(d.Env))
		for i, cmd := range d.Run {
			fmt.Fprintf(&b, "echo %s\n", shq("+ "+firstLine(cmd)))
			fmt.Fprintf(&b, "c %s /bin/bash -e %s/run/%d.sh\n", env, chrootCtx, i)
		}
	}
	fmt.Fprintf(&b, "rm -rf \"$root%s\" \"$root/root/.cache\" \"$root/root/.npm\"\n", chrootCtx)
	return b.String()
}

// setupScript runs inside the chroot as root: users, sudo, environment, files.
func setupScript(d Definition, files []resolvedFile) string {
	var b strings.Builder
	addUser := func(name, uidOpt string) {
		fmt.Fprintf(&b, "id -u %[1]s >/dev/null 2>&1 || useradd %[2]s--user-group --create-home --home-dir %[3]s --shell /bin/bash %[1]s\n",
			shq(name), uidOpt, shq(homeOf(name)))
		fmt.Fprintf(&b, "printf '%%s\\n' %s > /etc/sudoers.d/90-cubby-%s\n", shq(name+" ALL=(ALL:ALL) NOPASSWD: ALL"), name)
		fmt.Fprintf(&b, "chmod 0440 /etc/sudoers.d/90-cubby-%[1]s\nvisudo -cq -f /etc/sudoers.d/90-cubby-%[1]s\n", name)
	}
	addUser(DefaultUser, fmt.Sprintf("--uid %d ", DefaultUID))
	if d.User != DefaultUser && d.User != "root" {
		addUser(d.User, "")
	}
	b.WriteString("echo cubby > /etc/hostname\n")
	b.WriteString("printf '127.0.0.1\\tlocalhost\\n::1\\tlocalhost ip6-localhost ip6-loopback\\n127.0.1.1\\tcubby\\n' > /etc/hosts\n")
	if len(d.Env) > 0 {
		keys := sortedKeys(d.Env)
		fmt.Fprintf(&b, "touch /etc/environment\ngrep -Ev %s /etc/environment > /etc/environment.new || true\n",
			shq("^("+strings.Join(keys, "|")+")="))
		fmt.Fprintf(&b, "cat %s/environment >> /etc/environment.new\nmv /etc/environment.new /etc/environment\nchmod 0644 /etc/environment\n", chrootCtx)
	}
	fmt.Fprintf(&b, "[ -d %[1]s ] || { mkdir -p %[1]s && chown %[2]s: %[1]s; }\n", shq(d.Workdir), shq(d.User))
	for i, f := range files {
		fmt.Fprintf(&b, "install -D -T -m %04o %s/files/%d %s\n", f.Mode, chrootCtx, i, shq(f.Dest))
	}
	homes := []string{DefaultUser}
	if d.User != DefaultUser && d.User != "root" {
		homes = append(homes, d.User)
	}
	for _, u := range homes {
		fmt.Fprintf(&b, "chown -R %s: %s\n", shq(u), shq(homeOf(u)))
	}
	for _, f := range files {
		fmt.Fprintf(&b, "chown %s: %s\n", shq(fileOwner(d, f)), shq(f.Dest))
	}
	return b.String()
}

// fileOwner is the explicit owner or the user whose home holds the file, else root.
func fileOwner(d Definition, f resolvedFile) string {
	if f.Owner != "" {
		return f.Owner
	}
	for _, u := range []string{DefaultUser, d.User} {
		if u != "root" && strings.HasPrefix(f.Dest, homeOf(u)+"/") {
			return u
		}
	}
	return "root"
}

// environmentFile renders /etc/environment lines (pam_env syntax: KEY="value").
func environmentFile(env map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&b, "%s=\"%s\"\n", k, env[k])
	}
	return b.String()
}

func envPairs(env map[string]string) []string {
	var out []string
	for _, k := range sortedKeys(env) {
		out = append(out, k+"="+env[k])
	}
	return out
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// shq quotes s for POSIX sh.
func shq(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shqAll(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = shq(s)
	}
	return strings.Join(q, " ")
}
