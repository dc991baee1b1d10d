package template

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/cubby-dev/cubby/internal/layer"
)

// provisionScript makes any base (an image, a Debian tree) what sandboxes
// expect, as E2B's build does for images: bash and sudo (installed with
// whatever package manager the image has when missing), and the user
// "user" (uid 1000 when free) with a home and passwordless sudo. It runs as
// root in a build sandbox; it is cached like any step.
const provisionScript = `set -e
need=""
command -v bash >/dev/null 2>&1 || need="$need bash"
command -v sudo >/dev/null 2>&1 || need="$need sudo"
if [ -n "$need" ]; then
  echo "Installing:$need"
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need && rm -rf /var/lib/apt/lists/*
  elif command -v apk >/dev/null 2>&1; then
    apk add --no-cache $need
  elif command -v dnf >/dev/null 2>&1; then
    dnf install -y $need && dnf clean all
  elif command -v microdnf >/dev/null 2>&1; then
    microdnf install -y $need && microdnf clean all
  elif command -v yum >/dev/null 2>&1; then
    yum install -y $need && yum clean all
  elif command -v zypper >/dev/null 2>&1; then
    zypper --non-interactive install $need
  elif command -v pacman >/dev/null 2>&1; then
    pacman -Sy --noconfirm $need
  else
    echo "warning: no package manager found; $need not installed" >&2
  fi
fi
`

// addUserScript creates user name (uid 1000 when it is "user" and the uid
// is free) with a home directory and, with sudo, passwordless sudo.
func addUserScript(name string, sudo bool) string {
	var b strings.Builder
	q := shq(name)
	fmt.Fprintf(&b, "set -e\nif ! id -u %s >/dev/null 2>&1; then\n  uid=\"\"\n", q)
	if name == DefaultUser {
		fmt.Fprintf(&b, "  cut -d: -f3 /etc/passwd | grep -qx %d || uid=%d\n", DefaultUID, DefaultUID)
	}
	b.WriteString("  sh=/bin/sh; [ -x /bin/bash ] && sh=/bin/bash\n")
	fmt.Fprintf(&b, "  if command -v useradd >/dev/null 2>&1; then\n    useradd --create-home --user-group --shell \"$sh\" ${uid:+--uid $uid} %s\n", q)
	fmt.Fprintf(&b, "  else\n    adduser -D -s \"$sh\" ${uid:+-u $uid} %s\n  fi\nfi\n", q)
	fmt.Fprintf(&b, "home=$(grep '^%s:' /etc/passwd | cut -d: -f6); [ -n \"$home\" ] || home=/home/%s\n", name, name)
	fmt.Fprintf(&b, "mkdir -p \"$home\" && chown %s: \"$home\"\n", q)
	if sudo {
		line := shq(name + " ALL=(ALL:ALL) NOPASSWD: ALL")
		b.WriteString("if [ -d /etc/sudoers.d ] || command -v sudo >/dev/null 2>&1; then\n  mkdir -p /etc/sudoers.d\n")
		fmt.Fprintf(&b, "  printf '%%s\\n' %s > /etc/sudoers.d/90-cubby-%s\n  chmod 0440 /etc/sudoers.d/90-cubby-%s\n", line, name, name)
		b.WriteString("  if [ -f /etc/sudoers ] && ! grep -q '^[@#]includedir /etc/sudoers.d' /etc/sudoers; then echo '@includedir /etc/sudoers.d' >> /etc/sudoers; fi\n")
		fmt.Fprintf(&b, "  if command -v visudo >/dev/null 2>&1; then visudo -cq -f /etc/sudoers.d/90-cubby-%s; fi\nfi\n", name)
	}
	return b.String()
}

// provision runs the provisioning step on the base and makes "user" the
// build's user.
func (r *run) provision(ctx context.Context) error {
	script := provisionScript + addUserScript(DefaultUser, true)
	r.st.user, r.st.workdir = "root", "/"
	key := r.stepKey("provision", script)
	err := r.cached(ctx, StepBase, "[base] provision (bash, sudo, user \"user\")", key, false, func(w io.Writer) error {
		r.logf(LevelInfo, StepBase, "[base] Provisioning: bash, sudo and user %q", DefaultUser)
		return r.runInSandbox(ctx, StepBase, script, "root", "/", w)
	})
	if err != nil {
		return err
	}
	r.st.user, r.st.workdir = buildUser, buildWorkdir
	return nil
}

// account is a user of a tree's /etc/passwd.
type account struct {
	uid, gid int
	home     string
}

// lookupUser finds name in the tree's /etc/passwd (read inside the tree).
func lookupUser(tree, name string) (account, bool) {
	data, err := layer.ReadFile(tree, "/etc/passwd", 4<<20)
	if err != nil {
		return account{}, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 7 || f[0] != name {
			continue
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			return account{}, false
		}
		return account{uid: uid, gid: gid, home: f[5]}, true
	}
	return account{}, false
}

// shq quotes s for POSIX sh.
func shq(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shqAll quotes each element of list and joins them with spaces.
func shqAll(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = shq(s)
	}
	return strings.Join(q, " ")
}
