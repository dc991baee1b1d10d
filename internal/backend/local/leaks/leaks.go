// Package leaks inventories the host resources the local backend holds for one
// sandbox: mounts and loop devices of its disk, its network and user namespace
// files, host veth and the nftables set elements naming it, its id range lease,
// its cgroup directories, runtime state directories, and processes. Tests use
// it to prove that kills, failures, pauses and server restarts leave nothing
// behind (or exactly what a paused sandbox must keep). It reads /proc, /sys and nf_tables only; it changes nothing.
package leaks

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
	"github.com/cubby-dev/cubby/internal/userns"
)

// Options say where one server keeps its host resources. Zero fields take the
// defaults of the local backend and network manager.
type Options struct {
	// SandboxesDir is the backend's sandbox directory (local.Config.Dir). Required.
	SandboxesDir string
	// RunDir is the backend's run directory (local.Config.RunDir); "" = none.
	RunDir string
	// LeaseDir holds the id range leases; default userns.DefaultLeaseDir.
	LeaseDir string
	// RuntimeRoots are the state roots of the runtimes (runc/runsc --root).
	RuntimeRoots []string
	// NetnsDir holds the netns files; default /run/netns.
	NetnsDir string
	// CgroupRoot is the cgroup mount root; default /sys/fs/cgroup (v1 controllers
	// below it and cgroup2 at CgroupRoot/unified, or cgroup2 at CgroupRoot itself).
	CgroupRoot string
	// CgroupParent is the parent of per-sandbox cgroups; default "cubby".
	CgroupParent string
	// NftTable is the network manager's inet table (default: not checked).
	NftTable string
}

// Resources is what exists on the host for one sandbox.
type Resources struct {
	Dir        bool     // its sandbox directory or its run directory exists
	Mounts     []string // mount points at or below its directories, but namespace files
	Userns     []string // user namespace files (nsfs mounts) in its directory
	Lease      string   // the id range leased to its directory ("" = none)
	Loops      []string // loop devices backed by a file in its directory
	Netns      []string // netns files naming it
	Veths      []string // host links whose alias names it
	NoInternet bool     // its host link is in the no-internet set
	Firewall   []string // the other sets of the nftables table ("links", "own") holding its host link
	Cgroups    []string // cgroup directories named for it
	States     []string // runtime state (runc directories; runsc state, lock and socket files) named for it
	Processes  []string // "pid command line" of processes in its cgroup or naming it on their command line
}

// Running reports whether anything of a live container remains: mounts, loop
// devices, cgroups, runtime state or processes.
func (r Resources) Running() bool {
	return len(r.Mounts)+len(r.Loops)+len(r.Cgroups)+len(r.States)+len(r.Processes) > 0
}

// Empty reports whether nothing at all is left.
func (r Resources) Empty() bool {
	return !r.Dir && !r.Running() && len(r.Netns)+len(r.Veths)+len(r.Firewall)+len(r.Userns) == 0 && !r.NoInternet && r.Lease == ""
}

// String lists the resources found, for test failure messages.
func (r Resources) String() string {
	return fmt.Sprintf("dir=%v mounts=%v userns=%v lease=%q loops=%v netns=%v veths=%v noinet=%v firewall=%v cgroups=%v states=%v pids=%v",
		r.Dir, r.Mounts, r.Userns, r.Lease, r.Loops, r.Netns, r.Veths, r.NoInternet, r.Firewall, r.Cgroups, r.States, r.Processes)
}

func (o *Options) defaults() {
	if o.NetnsDir == "" {
		o.NetnsDir = "/run/netns"
	}
	if o.CgroupRoot == "" {
		o.CgroupRoot = "/sys/fs/cgroup"
	}
	if o.CgroupParent == "" {
		o.CgroupParent = "cubby"
	}
	if o.LeaseDir == "" {
		o.LeaseDir = userns.DefaultLeaseDir
	}
}

// Scan inventories sandbox id. Its host links are found by their alias and,
// when addr is valid, as the links the set "own" pairs with addr (so set
// elements outliving a deleted link are found too). Errors: unreadable /proc or /sys, or a failed nf_tables query.
func Scan(o Options, id string, addr netip.Addr) (Resources, error) {
	o.defaults()
	if id == "" || strings.ContainsAny(id, "/.") {
		return Resources{}, fmt.Errorf("invalid sandbox id %q", id)
	}
	var r Resources
	dir := filepath.Join(o.SandboxesDir, id)
	dirs := []string{dir}
	if o.RunDir != "" {
		dirs = append(dirs, filepath.Join(o.RunDir, id))
	}
	var errs []error
	for _, d := range dirs {
		_, err := os.Lstat(d)
		r.Dir = r.Dir || err == nil
		mounts, userns, err := mountsBelow(d)
		r.Mounts, r.Userns = append(r.Mounts, mounts...), append(r.Userns, userns...)
		errs = append(errs, err)
	}
	r.Lease = leaseOf(o.LeaseDir, dir)
	var e error
	r.Loops, e = loopsBelow(dir)
	errs = append(errs, e)
	r.Netns = globNames(o.NetnsDir, "*"+id)
	r.Veths, e = vethsFor(id)
	errs = append(errs, e)
	r.Firewall, r.NoInternet, e = firewallFor(o.NftTable, r.Veths, addr)
	errs = append(errs, e)
	r.Cgroups = cgroupsFor(o, id)
	for _, root := range o.RuntimeRoots {
		r.States = append(r.States, runtimeState(root, id)...)
	}
	r.Processes, e = processesFor(o.CgroupParent, id)
	errs = append(errs, e)
	return r, errors.Join(errs...)
}

// runtimeState lists the state a runtime keeps for container id in its state
// root: runc's directory "<root>/<id>"; runsc's "<id>_sandbox:<sandbox>.state"
// and ".lock" files and its "runsc-<id>.sock" control socket.
func runtimeState(root, id string) []string {
	var out []string
	if _, err := os.Lstat(filepath.Join(root, id)); err == nil {
		out = append(out, filepath.Join(root, id))
	}
	out = append(out, globNames(root, id+"_sandbox:*")...)
	return append(out, globNames(root, "runsc-"+id+".sock")...)
}

// mountsBelow lists mount points at or below dir from /proc/self/mountinfo:
// user namespace files (nsfs, root "user:[...]") apart.
func mountsBelow(dir string) (mounts, userns []string, err error) {
	all, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range all {
		switch p := m.Point; {
		case p != dir && !strings.HasPrefix(p, dir+"/"):
		case strings.HasPrefix(m.Root, "user:["):
			userns = append(userns, p)
		default:
			mounts = append(mounts, p)
		}
	}
	return mounts, userns, nil
}

// leaseOf returns the name of the lease in leaseDir held by owner, "" if none
// (see userns.Allocator: a lease file holds its owner's path).
func leaseOf(leaseDir, owner string) string {
	entries, _ := os.ReadDir(leaseDir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(leaseDir, e.Name()))
		if err == nil && strings.TrimSuffix(string(b), "\n") == owner {
			return e.Name()
		}
	}
	return ""
}

// loopsBelow lists loop devices whose backing file lies in dir.
func loopsBelow(dir string) ([]string, error) {
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		backing := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if strings.HasPrefix(backing, dir+"/") {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out, nil
}

// globNames returns the paths in dir matching pattern.
func globNames(dir, pattern string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	return m
}

// vethsFor lists host links whose alias ends in "/"+id (the network manager's
// "cubby:<prefix>/<id>" aliases).
func vethsFor(id string) ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []string
	for _, l := range links {
		if a := l.Attrs().Alias; strings.HasPrefix(a, "cubby:") && strings.HasSuffix(a, "/"+id) {
			out = append(out, l.Attrs().Name)
		}
	}
	return out, nil
}

// firewallFor reports which sets of the inet table hold one of the links
// names or a link paired with addr in the set "own"; noinet is reported apart.
func firewallFor(table string, names []string, addr netip.Addr) (sets []string, noinet bool, err error) {
	if table == "" {
		return nil, false, nil
	}
	c, err := nftables.New()
	if err != nil {
		return nil, false, fmt.Errorf("nftables: %w", err)
	}
	elems := map[string][][]byte{}
	for _, name := range []string{"links", "own", "noinet"} {
		set, err := c.GetSetByName(&nftables.Table{Family: nftables.TableFamilyINet, Name: table}, name)
		if err != nil {
			continue // no table, or no set: nothing held
		}
		list, err := c.GetSetElements(set)
		if err != nil {
			return nil, false, fmt.Errorf("list set %s of %s: %w", name, table, err)
		}
		for _, e := range list {
			elems[name] = append(elems[name], e.Key)
		}
	}
	mine := map[string]bool{}
	for _, n := range names {
		mine[n] = true
	}
	for _, k := range elems["own"] {
		if addr.IsValid() && len(k) == 20 && bytes.Equal(k[16:], addr.AsSlice()) {
			mine[keyName(k)] = true
		}
	}
	for _, name := range []string{"links", "own", "noinet"} {
		for _, k := range elems[name] {
			switch {
			case !mine[keyName(k)]:
			case name == "noinet":
				noinet = true
			default:
				sets = append(sets, name)
			}
		}
	}
	return sets, noinet, nil
}

// keyName is the interface name at the start of a set key (16 bytes, NUL padded).
func keyName(k []byte) string {
	return string(bytes.TrimRight(k[:min(len(k), 16)], "\x00"))
}

// cgroupsFor lists CgroupParent/id directories in every cgroup hierarchy.
func cgroupsFor(o Options, id string) []string {
	var out []string
	rel := filepath.Join(o.CgroupParent, id)
	if _, err := os.Stat(filepath.Join(o.CgroupRoot, rel)); err == nil {
		out = append(out, filepath.Join(o.CgroupRoot, rel)) // cgroup2 at the root
	}
	out = append(out, globNames(o.CgroupRoot, filepath.Join("*", rel))...)
	return out
}

// zombie reports whether process pid has exited and waits to be reaped. A
// container's init is reparented to the host's init, which reaps it in its own
// time; a zombie holds no memory, mounts or files, so it is not a leak.
func zombie(pid string) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return true // gone meanwhile
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X'
}

// processesFor lists live (non-zombie) processes whose cgroup path contains
// parent/id or whose command line contains id (runc and runsc helpers name the
// container).
func processesFor(parent, id string) ([]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	self := os.Getpid()
	needle := "/" + parent + "/" + id
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if (bytes.Contains(cg, []byte(needle)) || bytes.Contains(cmd, []byte(id))) && !zombie(e.Name()) {
			out = append(out, fmt.Sprintf("%d %s", pid, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
		}
	}
	return out, nil
}
