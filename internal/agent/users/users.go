// Package users resolves the sandbox user a request runs as and the paths it names,
// following envd's rules (docs/wire/envd.md): the user comes from the
// `Authorization: Basic base64("<user>:")` header (or the `username` query of /files),
// else the sandbox default; relative paths resolve against that user's home.
package users

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"connectrpc.com/connect"
)

// ErrUnknownUser is wrapped by errors for a username that does not exist in the sandbox.
var ErrUnknownUser = errors.New("invalid username")

// User is a resolved account of the sandbox's /etc/passwd.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Home   string
	Groups []uint32 // supplementary group IDs
}

// Lookup resolves name in the sandbox's user database. An unknown name returns an
// error wrapping ErrUnknownUser with envd's message "invalid username: '<name>'".
func Lookup(name string) (*User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("%w: '%s'", ErrUnknownUser, name)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", name, u.Gid, err)
	}
	res := &User{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil {
				res.Groups = append(res.Groups, uint32(g))
			}
		}
	}
	return res, nil
}

// FromBasicAuth returns the username of an `Authorization: Basic` header (the
// password is ignored, the SDKs send it empty) and whether one was present.
func FromBasicAuth(h http.Header) (string, bool, error) {
	v := h.Get("Authorization")
	if v == "" {
		return "", false, nil
	}
	scheme, payload, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", false, nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(payload))
	if err != nil {
		return "", false, fmt.Errorf("decode basic authorization: %w", err)
	}
	name, _, _ := strings.Cut(string(raw), ":")
	if name == "" {
		return "", false, nil
	}
	return name, true, nil
}

// Resolve maps a request path to an absolute, cleaned path for u:
// "" → workdir (or the home when workdir is ""), "~" and "~/x" → the home,
// other relative paths → joined to the home, absolute paths → cleaned as is.
func (u *User) Resolve(path, workdir string) string {
	switch {
	case path == "":
		if workdir != "" {
			return filepath.Clean(workdir)
		}
		return u.Home
	case path == "~":
		return u.Home
	case strings.HasPrefix(path, "~/"):
		return filepath.Join(u.Home, path[2:])
	case filepath.IsAbs(path):
		return filepath.Clean(path)
	default:
		return filepath.Join(u.Home, path)
	}
}

// ForRPC resolves the user of an envd Connect RPC: the Basic authorization
// username, else defaultUser. Errors are Connect errors as envd sends them: a
// malformed header or an unknown user is `unauthenticated` ("invalid username:
// '<u>'"), a broken user database `internal`.
func ForRPC(h http.Header, defaultUser string) (*User, error) {
	name, ok, err := FromBasicAuth(h)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	if !ok {
		name = defaultUser
	}
	u, err := Lookup(name)
	if errors.Is(err, ErrUnknownUser) {
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return u, nil
}
