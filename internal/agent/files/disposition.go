package files

import (
	"net/url"
	"strings"
)

// dispositionParams parses the parameters of a multipart part's
// Content-Disposition value (`form-data; name="file"; filename="/a/b.txt"`) into a
// map with lowercased names. Unlike multipart.Part.FileName it keeps directories
// (the filename is the destination path, docs/wire/envd.md). Quoted strings honour
// the escapes `\"` and `\\` (other backslashes are literal); the WHATWG form
// encoding used by undici and browsers (%22, %0A, %0D) is undone in quoted
// filenames; an RFC 5987 extended `filename*` (UTF-8) takes precedence over `filename`.
func dispositionParams(v string) map[string]string {
	params := map[string]string{}
	_, rest, _ := strings.Cut(v, ";")
	for rest != "" {
		rest = strings.TrimLeft(rest, " \t;")
		var key, val string
		eq := strings.IndexAny(rest, "=;")
		if eq < 0 || rest[eq] == ';' {
			if eq < 0 {
				eq = len(rest)
			}
			rest = rest[eq:]
			continue // a parameter without value
		}
		key = strings.ToLower(strings.TrimSpace(rest[:eq]))
		rest = strings.TrimLeft(rest[eq+1:], " \t")
		if strings.HasPrefix(rest, `"`) {
			val, rest = quoted(rest[1:])
			if key == "filename" {
				val = undoFormEncoding(val)
			}
		} else {
			end := strings.IndexByte(rest, ';')
			if end < 0 {
				end = len(rest)
			}
			val, rest = strings.TrimSpace(rest[:end]), rest[end:]
		}
		if base, ext := strings.CutSuffix(key, "*"); ext {
			if dec, ok := decodeExtValue(val); ok {
				params[base+"*"] = dec
			}
			continue
		}
		params[key] = val
	}
	for k, v := range params {
		if base, ext := strings.CutSuffix(k, "*"); ext {
			params[base] = v
			delete(params, k)
		}
	}
	return params
}

// quoted reads a quoted-string body up to its closing quote and returns the
// unescaped value and the remaining input.
func quoted(s string) (string, string) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\'):
			b.WriteByte(s[i+1])
			i++
		case c == '"':
			return b.String(), s[i+1:]
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), ""
}

// undoFormEncoding reverses the escaping of quotes and newlines that the
// WHATWG multipart/form-data encoder applies to filenames.
func undoFormEncoding(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	return strings.NewReplacer("%22", `"`, "%0A", "\n", "%0D", "\r", "%0a", "\n", "%0d", "\r").Replace(s)
}

// decodeExtValue decodes an RFC 5987 ext-value `charset'lang'pct-encoded`
// (UTF-8 or US-ASCII only).
func decodeExtValue(v string) (string, bool) {
	charset, rest, ok := strings.Cut(v, "'")
	if !ok {
		return "", false
	}
	_, enc, ok := strings.Cut(rest, "'")
	if !ok {
		return "", false
	}
	switch strings.ToLower(charset) {
	case "utf-8", "us-ascii":
	default:
		return "", false
	}
	dec, err := url.PathUnescape(enc)
	if err != nil {
		return "", false
	}
	return dec, true
}
