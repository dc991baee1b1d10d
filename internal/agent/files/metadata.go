package files

import (
	"fmt"
	"net/http"
	"strings"
)

// Metadata limits of docs/wire/envd.md.
const (
	metadataHeaderPrefix = "X-Metadata-"
	maxMetadataKey       = 246  // bytes: "user.e2b." + key fits the 255-byte xattr name limit
	maxMetadataTotal     = 4096 // bytes: sum of every key and value
)

// parseMetadata collects the X-Metadata-<Key> headers of an upload into a map of
// lowercased keys (docs/wire/envd.md). Keys and values must be printable ASCII
// (0x20–0x7E), keys non-empty and at most 246 bytes, and the keys and values
// together at most 4096 bytes; otherwise the error describes the violation (400).
// A repeated header keeps its first value. No headers → an empty map.
func parseMetadata(h http.Header) (map[string]string, error) {
	md := map[string]string{}
	total := 0
	for name, vals := range h {
		if len(name) < len(metadataHeaderPrefix) || !strings.EqualFold(name[:len(metadataHeaderPrefix)], metadataHeaderPrefix) {
			continue
		}
		key := strings.ToLower(name[len(metadataHeaderPrefix):])
		val := ""
		if len(vals) > 0 {
			val = vals[0]
		}
		switch {
		case key == "":
			return nil, fmt.Errorf("metadata header %q has an empty key", name)
		case len(key) > maxMetadataKey:
			return nil, fmt.Errorf("metadata key %q is longer than %d bytes", key, maxMetadataKey)
		case !printable(key):
			return nil, fmt.Errorf("metadata key %q must be printable ASCII", key)
		case !printable(val):
			return nil, fmt.Errorf("metadata value of %q must be printable ASCII", key)
		}
		total += len(key) + len(val)
		md[key] = val
	}
	if total > maxMetadataTotal {
		return nil, fmt.Errorf("metadata is %d bytes, more than %d", total, maxMetadataTotal)
	}
	return md, nil
}

// printable reports whether s holds only bytes 0x20–0x7E.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
