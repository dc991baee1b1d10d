package template

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/cubby-dev/cubby/internal/image"
)

// Step types of a build (E2B's TemplateStep.type, docs/templates.md).
const (
	StepRun     = "RUN"     // args [command, user?]: command run by bash -c (sh when bash is missing)
	StepCopy    = "COPY"    // args [src, dest, user?, mode?] + filesHash: files uploaded for the build
	StepEnv     = "ENV"     // args [k1, v1, k2, v2, ...]
	StepWorkdir = "WORKDIR" // args [path]: created when missing, owned by the current user
	StepUser    = "USER"    // args [name]: created (with a home) when missing
)

// ErrInvalidSpec is wrapped by every validation error of a build spec.
var ErrInvalidSpec = errors.New("invalid template build")

// Step is one build step, as E2B's template build API sends it.
type Step struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash,omitempty"` // COPY: the uploaded tar's key (64 hex digits)
	Force     bool     `json:"force,omitempty"`     // run even when a cached result exists
}

// Debootstrap is a base built from Debian packages with mmdebstrap.
type Debootstrap struct {
	Suite    string   `json:"suite"`    // e.g. "bookworm"
	Variant  string   `json:"variant"`  // mmdebstrap --variant
	Packages []string `json:"packages"` // --include, sorted
}

// Source is what a build starts from; exactly one of Image, Template and
// Debian is set.
type Source struct {
	Image    string             // OCI image reference ("python:3.12", "registry:5000/team/app@sha256:…")
	Registry *image.Credentials // credentials for Image; nil = anonymous
	Template string             // a built template: ID, name or name:tag
	Debian   *Debootstrap       // mmdebstrap (built-in and cubby-template.yaml templates)
}

// Spec is a complete build: base, steps and how sandboxes of the result start.
type Spec struct {
	From     Source
	Steps    []Step
	StartCmd string // run at each sandbox start (in the background), as the final user
	ReadyCmd string // a create returns once it exits 0 (retried every second)
	Force    bool   // ignore every cached step
	Runtime  string // "runc", "runsc" or "" (server default); not a build input
}

var (
	filesHashRe = regexp.MustCompile(`^[0-9a-f]{64}$`)
	octalModeRe = regexp.MustCompile(`^0?[0-7]{3,4}$`)
)

// Validate checks s and returns nil or an error wrapping ErrInvalidSpec that
// names the first problem of each step ("steps[3]: …").
func (s Spec) Validate() error {
	var v validator
	n := 0
	for _, set := range []bool{s.From.Image != "", s.From.Template != "", s.From.Debian != nil} {
		if set {
			n++
		}
	}
	v.check(n == 1, "from", "exactly one of fromImage and fromTemplate is required")
	v.check(s.From.Registry == nil || s.From.Image != "", "fromImageRegistry", "only applies to fromImage")
	for i, st := range s.Steps {
		if err := st.validate(); err != nil {
			v.errs = append(v.errs, fmt.Errorf("steps[%d]: %w", i, err))
		}
	}
	v.check(!strings.ContainsRune(s.StartCmd, 0) && !strings.ContainsRune(s.ReadyCmd, 0), "startCmd", "contains a NUL byte")
	v.check(s.Runtime == "" || contains(Runtimes, s.Runtime), "runtime", "%q not supported", s.Runtime)
	if len(v.errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, errors.Join(v.errs...))
	}
	return nil
}

func (st Step) validate() error {
	for _, a := range st.Args {
		if strings.ContainsRune(a, 0) {
			return errors.New("an argument contains a NUL byte")
		}
	}
	switch st.Type {
	case StepRun:
		return argCount(st, 1, 2, "[command, user?]")
	case StepCopy:
		return st.validateCopy()
	case StepEnv:
		if len(st.Args) == 0 || len(st.Args)%2 != 0 {
			return errors.New("ENV takes pairs of arguments [name, value, ...]")
		}
		for i := 0; i < len(st.Args); i += 2 {
			if !envKeyRe.MatchString(st.Args[i]) {
				return fmt.Errorf("ENV name %q must match %s", st.Args[i], envKeyRe)
			}
		}
		return nil
	case StepWorkdir:
		if err := argCount(st, 1, 1, "[path]"); err != nil {
			return err
		}
		if !path.IsAbs(st.Args[0]) && st.Args[0] != "" {
			return nil // relative: resolved against the current workdir
		}
		return nil
	case StepUser:
		if err := argCount(st, 1, 1, "[user]"); err != nil {
			return err
		}
		return validUser(st.Args[0])
	}
	return fmt.Errorf("unknown step type %q (want RUN, COPY, ENV, WORKDIR or USER)", st.Type)
}

func (st Step) validateCopy() error {
	if err := argCount(st, 2, 4, "[src, dest, user?, mode?]"); err != nil {
		return err
	}
	if !filesHashRe.MatchString(st.FilesHash) {
		return fmt.Errorf("COPY needs filesHash (64 hex digits), got %q", st.FilesHash)
	}
	if st.Args[0] == "" || st.Args[1] == "" {
		return errors.New("COPY source and destination must not be empty")
	}
	if len(st.Args) > 2 && st.Args[2] != "" {
		if err := validUser(st.Args[2]); err != nil {
			return err
		}
	}
	if len(st.Args) > 3 && st.Args[3] != "" && !octalModeRe.MatchString(st.Args[3]) {
		return fmt.Errorf("COPY mode %q is not an octal mode like 0755", st.Args[3])
	}
	return nil
}

func argCount(st Step, lo, hi int, shape string) error {
	if len(st.Args) < lo || len(st.Args) > hi {
		return fmt.Errorf("%s takes %s, got %d arguments", st.Type, shape, len(st.Args))
	}
	if st.Args[0] == "" {
		return fmt.Errorf("%s: the first argument is empty", st.Type)
	}
	return nil
}

// sdkUserRe accepts user names as useradd and busybox adduser do.
var sdkUserRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}$`)

func validUser(name string) error {
	if !sdkUserRe.MatchString(name) {
		return fmt.Errorf("user %q is not a valid user name", name)
	}
	return nil
}

// copyMode parses a COPY mode argument ("" = keep the uploaded modes).
func copyMode(arg string) (uint32, bool) {
	if arg == "" {
		return 0, false
	}
	v, err := strconv.ParseUint(arg, 8, 32)
	return uint32(v), err == nil
}

// describe renders a step for build logs ("RUN apt-get update && …").
func (st Step) describe() string {
	switch st.Type {
	case StepRun:
		s := "RUN " + firstLine(st.Args[0])
		if len(st.Args) > 1 && st.Args[1] != "" {
			s += " (as " + st.Args[1] + ")"
		}
		return s
	case StepEnv:
		var kv []string
		for i := 0; i+1 < len(st.Args); i += 2 {
			kv = append(kv, st.Args[i]+"="+st.Args[i+1])
		}
		return "ENV " + strings.Join(kv, " ")
	}
	return st.Type + " " + strings.Join(st.Args[:min(len(st.Args), 2)], " ")
}
