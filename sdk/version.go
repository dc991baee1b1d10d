package sdk

import (
	"strconv"
	"strings"
)

// versionAtLeast reports whether the semver v is >= min, comparing
// major.minor.patch and ignoring pre-release and build suffixes. An
// unparsable v counts as new enough (the server chose to send it).
func versionAtLeast(v, min string) bool {
	a, ok := parseVersion(v)
	if !ok {
		return true
	}
	b, _ := parseVersion(min)
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return true
}

func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}
