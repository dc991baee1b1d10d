package policy

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/net/http/httpguts"
)

// Placeholder syntax of header values: ${e2b.secrets.NAME} is replaced with the
// value of the secret NAME (case-insensitive: names are stored lower-cased).
// Other ${e2b.…} placeholders (workload identity tokens) are not supported;
// any other text, "${" included, is literal.
const (
	placeholderOpen = "${"
	secretsPrefix   = "e2b.secrets."
	e2bPrefix       = "e2b."
)

// Template is a header value that may hold secret placeholders.
type Template string

// ErrUnknownSecret is returned (wrapped) by Expand for a placeholder whose
// secret does not exist.
var ErrUnknownSecret = errors.New("unknown secret")

// ParseTemplate validates value: placeholders are well formed and name
// secrets, the literal text is a valid header value (no CR, LF or NUL), and it
// is at most MaxHeaderValue bytes. Errors are *FieldError values naming field.
func ParseTemplate(field, value string) (Template, error) {
	if len(value) > MaxHeaderValue {
		return "", fieldErr(field, "value longer than %d bytes", MaxHeaderValue)
	}
	var literal strings.Builder
	err := walk(value, func(text, secret string) error {
		literal.WriteString(text)
		if secret != "" {
			if err := ValidSecretName(secret); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", fieldErr(field, "%v", err)
	}
	if !httpguts.ValidHeaderFieldValue(literal.String()) {
		return "", fieldErr(field, "the value holds characters a header may not (CR, LF, NUL or other controls)")
	}
	return Template(value), nil
}

// walk calls fn for each literal run (secret "") and each secret placeholder
// (text "") of s, in order.
func walk(s string, fn func(text, secret string) error) error {
	for s != "" {
		i := strings.Index(s, placeholderOpen+e2bPrefix)
		if i < 0 {
			return fn(s, "")
		}
		if err := fn(s[:i], ""); err != nil {
			return err
		}
		rest := s[i+len(placeholderOpen):]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return fmt.Errorf("unterminated placeholder %q", s[i:])
		}
		inner := rest[:end]
		name, ok := strings.CutPrefix(inner, secretsPrefix)
		if !ok {
			return fmt.Errorf("placeholder ${%s} is not supported (only ${e2b.secrets.NAME})", inner)
		}
		if err := fn("", strings.ToLower(name)); err != nil {
			return err
		}
		s = rest[end+1:]
	}
	return nil
}

// Secrets returns the (lower-cased) secret names t refers to.
func (t Template) Secrets() []string {
	var out []string
	_ = walk(string(t), func(_, secret string) error {
		if secret != "" {
			out = append(out, secret)
		}
		return nil
	})
	return out
}

// Expand replaces every placeholder of t with lookup(name). Errors: lookup's
// (ErrUnknownSecret for a deleted secret), and a value that cannot be sent in
// a header (CR, LF, NUL).
func (t Template) Expand(lookup func(name string) (string, error)) (string, error) {
	var b strings.Builder
	err := walk(string(t), func(text, secret string) error {
		if secret == "" {
			b.WriteString(text)
			return nil
		}
		v, err := lookup(secret)
		if err != nil {
			return err
		}
		b.WriteString(v)
		return nil
	})
	if err != nil {
		return "", err
	}
	if !httpguts.ValidHeaderFieldValue(b.String()) {
		return "", errors.New("a secret's value holds characters a header may not (CR, LF, NUL)")
	}
	return b.String(), nil
}

// Secret names: 1-128 bytes of printable UTF-8 without '{' or '}' (they are
// written inside ${e2b.secrets.NAME}); "sec_" starts secret IDs, not names.
const (
	MaxSecretName  = 128
	SecretIDPrefix = "sec_"
)

// ValidSecretName checks a secret name (case-insensitive).
func ValidSecretName(name string) error {
	if name == "" || len(name) > MaxSecretName {
		return fmt.Errorf("secret name %q must be 1-%d bytes", name, MaxSecretName)
	}
	if strings.HasPrefix(strings.ToLower(name), SecretIDPrefix) {
		return fmt.Errorf("secret name %q: the prefix %q is reserved for secret IDs", name, SecretIDPrefix)
	}
	for _, r := range name {
		if r == '{' || r == '}' || r == unicode.ReplacementChar || unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("secret name %q holds '{', '}', spaces or control characters", name)
		}
	}
	return nil
}
