package template

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Spec compiles the definition into the build every template goes through
// (one builder): a Debian base from mmdebstrap, then COPY steps for its
// files (one per owner), ENV, pip and npm installs and its run commands as
// RUN steps (as root, in /), and its user and workdir as USER and WORKDIR
// steps. Files holds the archives of the COPY steps. Errors: reading a file
// source.
func (d Definition) Spec() (Spec, MemFiles, error) {
	d = d.withDefaults()
	files, err := d.resolveFiles()
	if err != nil {
		return Spec{}, nil, fmt.Errorf("template %s: %w", d.Name, err)
	}
	spec := Spec{From: Source{Debian: &Debootstrap{Suite: d.Suite, Variant: d.Variant, Packages: d.Includes()}}, Runtime: d.Runtime}
	mem := MemFiles{}
	root := func(cmd string) Step { return Step{Type: StepRun, Args: []string{cmd, "root"}} }
	if d.User != DefaultUser && d.User != "root" {
		spec.Steps = append(spec.Steps, root(addUserScript(d.User, true)))
	}
	for _, owner := range owners(d) {
		step, ok, err := copyFilesStep(d, files, owner, mem)
		if err != nil {
			return Spec{}, nil, err
		}
		if ok {
			spec.Steps = append(spec.Steps, step)
		}
	}
	if len(d.Env) > 0 {
		var args []string
		for _, k := range sortedKeys(d.Env) {
			args = append(args, k, d.Env[k])
		}
		spec.Steps = append(spec.Steps, Step{Type: StepEnv, Args: args})
	}
	spec.Steps = append(spec.Steps, Step{Type: StepWorkdir, Args: []string{"/"}})
	if len(d.Pip) > 0 {
		spec.Steps = append(spec.Steps, root("python3 -m pip install --break-system-packages --no-cache-dir --root-user-action=ignore "+
			"--disable-pip-version-check --no-input --progress-bar off "+shqAll(d.Pip)))
	}
	if len(d.Npm) > 0 {
		spec.Steps = append(spec.Steps, root("npm install -g --no-fund --no-audit --no-update-notifier "+shqAll(d.Npm)+" && rm -rf /root/.npm"))
	}
	for _, cmd := range d.Run {
		spec.Steps = append(spec.Steps, root("set -e\n"+cmd))
	}
	spec.Steps = append(spec.Steps, Step{Type: StepUser, Args: []string{d.User}}, Step{Type: StepWorkdir, Args: []string{d.Workdir}})
	return spec, mem, nil
}

// archiveTime is the mtime of definition files: fixed, so equal files give
// equal archives (and cache hits).
var archiveTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// owners are the accounts files of d may belong to, each once.
func owners(d Definition) []string {
	out := []string{"root", DefaultUser}
	if d.User != "root" && d.User != DefaultUser {
		out = append(out, d.User)
	}
	return out
}

// copyFilesStep makes one COPY step for the definition's files owned by
// owner: an archive of them at their destinations, copied onto "/". ok is
// false when owner owns none.
func copyFilesStep(d Definition, files []resolvedFile, owner string, mem MemFiles) (Step, bool, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	n := 0
	for _, f := range files {
		if fileOwner(d, f) != owner {
			continue
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Dest, "/"), Mode: int64(f.Mode),
			Size: int64(len(f.content)), ModTime: archiveTime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return Step{}, false, err
		}
		if _, err := tw.Write(f.content); err != nil {
			return Step{}, false, err
		}
		n++
	}
	if err := tw.Close(); err != nil || n == 0 {
		return Step{}, false, err
	}
	sum := sha256.Sum256(buf.Bytes())
	hash := hex.EncodeToString(sum[:])
	mem[hash] = buf.Bytes()
	return Step{Type: StepCopy, Args: []string{".", "/", owner, ""}, FilesHash: hash}, true, nil
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

// MemFiles serves COPY archives held in memory, keyed by their sha256 (the
// files of cubby-template.yaml definitions). It implements Files.
type MemFiles map[string][]byte

// Open implements Files.
func (m MemFiles) Open(_, filesHash string) (io.ReadSeekCloser, v1.Hash, error) {
	b, ok := m[filesHash]
	if !ok {
		return nil, v1.Hash{}, fmt.Errorf("%s: %w", filesHash, ErrFilesMissing)
	}
	sum := sha256.Sum256(b)
	return nopSeekCloser{bytes.NewReader(b)}, v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}, nil
}

type nopSeekCloser struct{ *bytes.Reader }

func (nopSeekCloser) Close() error { return nil }
