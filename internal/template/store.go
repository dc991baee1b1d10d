package template

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	currentLink = "current"
	infoFile    = "template.json"
	aliasLock   = "aliases" // lock name guarding alias checks + current switches
)

func (m *Manager) stagingDir() string { return filepath.Join(m.dir, ".staging") }

// lock takes the exclusive flock name in <dir>/.locks, waiting until ctx is done.
func (m *Manager) lock(ctx context.Context, name string) (func(), error) {
	for {
		unlock, ok, err := m.tryLock(name)
		if err != nil || ok {
			return unlock, err
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("wait for lock %s: %w", name, ctx.Err())
		case <-t.C:
		}
	}
}

// tryLock takes the flock name if it is free; ok is false if another build holds it.
func (m *Manager) tryLock(name string) (unlock func(), ok bool, err error) {
	dir := filepath.Join(m.dir, ".locks")
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	return func() { f.Close() }, true, nil
}

// trees lists the tree directory names of template id (current first).
func (m *Manager) trees(id string) []string {
	entries, err := os.ReadDir(filepath.Join(m.dir, id))
	if err != nil {
		return nil
	}
	cur, _ := os.Readlink(filepath.Join(m.dir, id, currentLink))
	var out []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != cur {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	if cur != "" {
		out = append([]string{cur}, out...)
	}
	return out
}

// readInfo loads <dir>/<id>/<tree>/template.json.
func (m *Manager) readInfo(id, tree string) (Info, error) {
	treeDir := filepath.Join(m.dir, id, tree)
	data, err := os.ReadFile(filepath.Join(treeDir, infoFile))
	if err != nil {
		return Info{}, fmt.Errorf("template %s tree %s: %w", id, tree, err)
	}
	var info Info
	if err := json.Unmarshal(data, &info); err != nil {
		return Info{}, fmt.Errorf("template %s tree %s: %s: %w", id, tree, infoFile, err)
	}
	info.RootfsDir = filepath.Join(treeDir, "rootfs")
	return info, nil
}

// readCurrent loads the Info of id's current tree; errors wrap fs.ErrNotExist
// when the template has no current tree.
func (m *Manager) readCurrent(id string) (Info, error) {
	tree, err := os.Readlink(filepath.Join(m.dir, id, currentLink))
	if err != nil {
		return Info{}, fmt.Errorf("template %s: %w", id, err)
	}
	return m.readInfo(id, tree)
}

// syncRuntime records runtime in the template.json of info's tree when it
// differs (the runtime is not part of the digest, so a cached tree may carry an
// older value). The file is replaced atomically; the caller holds id's lock.
func (m *Manager) syncRuntime(info Info, runtime string) (Info, error) {
	if info.Runtime == runtime {
		return info, nil
	}
	info.Runtime = runtime
	treeDir := filepath.Dir(info.RootfsDir)
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return Info{}, fmt.Errorf("encode %s: %w", infoFile, err)
	}
	tmp := filepath.Join(treeDir, "."+infoFile+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := writeFileSync(tmp, append(data, '\n')); err != nil {
		return Info{}, fmt.Errorf("template %s: update runtime: %w", info.ID, err)
	}
	if err := os.Rename(tmp, filepath.Join(treeDir, infoFile)); err != nil {
		os.Remove(tmp)
		return Info{}, fmt.Errorf("template %s: update runtime: %w", info.ID, err)
	}
	if err := syncDir(treeDir); err != nil {
		return Info{}, err
	}
	m.log.Info("template runtime updated", "id", info.ID, "name", info.Name, "runtime", runtime)
	return info, nil
}

// setCurrent atomically points <dir>/<id>/current at tree.
func (m *Manager) setCurrent(id, tree string) error {
	dir := filepath.Join(m.dir, id)
	tmp := filepath.Join(dir, ".current-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.Symlink(tree, tmp); err != nil {
		return fmt.Errorf("set current tree of %s: %w", id, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, currentLink)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("set current tree of %s: %w", id, err)
	}
	return syncDir(dir)
}

// commit measures the staged tree, writes template.json and moves it into place.
func (m *Manager) commit(ctx context.Context, def Definition, id, digest, treeDir string) (Info, error) {
	size, err := treeSize(filepath.Join(treeDir, "rootfs"))
	if err != nil {
		return Info{}, err
	}
	info := Info{
		ID: id, Name: def.Name, Aliases: append([]string{def.Name}, def.Aliases...), Digest: digest,
		BuiltAt: time.Now().UTC().Truncate(time.Second), SizeBytes: size, User: def.User,
		Workdir: def.Workdir, Env: def.Env, Packages: def.Includes(), Runtime: def.Runtime,
	}
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return Info{}, fmt.Errorf("encode %s: %w", infoFile, err)
	}
	if err := writeFileSync(filepath.Join(treeDir, infoFile), append(data, '\n')); err != nil {
		return Info{}, err
	}
	unlock, err := m.lock(ctx, aliasLock)
	if err != nil {
		return Info{}, err
	}
	defer unlock()
	if err := m.checkAliases(id, def); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("commit cancelled: %w", err)
	}
	return m.moveIntoPlace(info, treeDir)
}

// moveIntoPlace renames the staged tree to a free tree name and makes it current.
func (m *Manager) moveIntoPlace(info Info, treeDir string) (Info, error) {
	dir := filepath.Join(m.dir, info.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Info{}, fmt.Errorf("commit: %w", err)
	}
	tree := info.Digest
	for n := 2; ; n++ {
		if _, err := os.Lstat(filepath.Join(dir, tree)); errors.Is(err, fs.ErrNotExist) {
			break
		}
		tree = fmt.Sprintf("%s.%d", info.Digest, n)
	}
	final := filepath.Join(dir, tree)
	if err := os.Rename(treeDir, final); err != nil {
		return Info{}, fmt.Errorf("commit: %w", err)
	}
	if err := m.setCurrent(info.ID, tree); err != nil {
		if rerr := removeTree(final); rerr != nil {
			m.log.Error("remove uncommitted template tree", "dir", final, "err", rerr)
		}
		return Info{}, err
	}
	info.RootfsDir = filepath.Join(final, "rootfs")
	return info, nil
}

// checkAliases fails if def's name or aliases name a template other than id.
func (m *Manager) checkAliases(id string, def Definition) error {
	all, err := m.List()
	if err != nil {
		return err
	}
	want := append([]string{def.Name}, def.Aliases...)
	for _, other := range all {
		if other.ID == id {
			continue
		}
		for _, a := range want {
			if contains(other.Aliases, a) || a == other.ID {
				return fmt.Errorf("%w: %q names template %s (%s)", ErrAliasTaken, a, other.Name, other.ID)
			}
		}
	}
	return nil
}

// Get returns the current tree of the template with this ID, name or alias.
// Unknown names return an error wrapping ErrNotFound.
func (m *Manager) Get(idOrAlias string) (Info, error) {
	if !nameRe.MatchString(idOrAlias) {
		return Info{}, fmt.Errorf("template %q: %w", idOrAlias, ErrNotFound)
	}
	for _, id := range []string{idOrAlias, IDFor(idOrAlias)} {
		info, err := m.readCurrent(id)
		if err == nil {
			return info, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return Info{}, err
		}
	}
	all, err := m.List()
	if err != nil {
		return Info{}, err
	}
	for _, info := range all {
		if contains(info.Aliases, idOrAlias) {
			return info, nil
		}
	}
	return Info{}, fmt.Errorf("template %q: %w", idOrAlias, ErrNotFound)
}

// List returns the current tree of every built template, sorted by name.
func (m *Manager) List() ([]Info, error) {
	entries, err := os.ReadDir(m.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	var out []Info
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := m.readCurrent(e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list templates: %w", err)
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Prune deletes every tree that is neither its template's current tree nor listed
// in inUse (keys are Info.RootfsDir values of running sandboxes), and staging
// dirs of builds that are no longer running. Templates being built are skipped.
// It returns the removed rootfs paths.
func (m *Manager) Prune(ctx context.Context, inUse map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(m.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("prune templates: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if ctx.Err() != nil {
			return removed, fmt.Errorf("prune templates: %w", ctx.Err())
		}
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		r, err := m.pruneTemplate(e.Name(), inUse)
		removed = append(removed, r...)
		errs = append(errs, err)
	}
	errs = append(errs, m.pruneStaging())
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("prune templates: %w", err)
	}
	return removed, nil
}

func (m *Manager) pruneTemplate(id string, inUse map[string]bool) ([]string, error) {
	unlock, ok, err := m.tryLock(id)
	if err != nil || !ok {
		return nil, err
	}
	defer unlock()
	dir := filepath.Join(m.dir, id)
	cur, _ := os.Readlink(filepath.Join(dir, currentLink))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name, p := e.Name(), filepath.Join(dir, e.Name())
		switch {
		case strings.HasPrefix(name, ".current-"):
			errs = append(errs, os.Remove(p))
		case !e.IsDir() || name == cur || strings.HasPrefix(name, ".") || inUse[filepath.Join(p, "rootfs")]:
		default:
			if err := removeTree(p); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, filepath.Join(p, "rootfs"))
		}
	}
	if cur == "" {
		os.Remove(dir) // only succeeds when empty
	}
	return removed, errors.Join(errs...)
}

// pruneStaging removes staging dirs whose template lock is free (crashed builds).
func (m *Manager) pruneStaging() error {
	entries, err := os.ReadDir(m.stagingDir())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range entries {
		id, _, _ := strings.Cut(e.Name(), "-")
		unlock, ok, err := m.tryLock(id)
		if err != nil || !ok {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, removeTree(filepath.Join(m.stagingDir(), e.Name())))
		unlock()
	}
	return errors.Join(errs...)
}

// removeTree detaches any mount at or below dir (a crashed build's chroot mounts
// must never be recursed into) and then deletes dir.
func removeTree(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, mp := range mounts {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s before removing %s: %w", mp, dir, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unescapeMount decodes mountinfo's octal escapes (\040 for space etc.).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// treeSize sums the disk usage (allocated blocks, hard links counted once) of dir in bytes.
func treeSize(dir string) (int64, error) {
	type key struct{ dev, ino uint64 }
	seen := map[key]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			total += fi.Size()
			return nil
		}
		if st.Nlink > 1 && !fi.IsDir() {
			k := key{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("measure %s: %w", dir, err)
	}
	return total, nil
}

func writeFileSync(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	return f.Close()
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
