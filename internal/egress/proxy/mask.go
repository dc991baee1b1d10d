package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// mask replaces every occurrence of the values in resp's headers and body by
// as many '*' (so Content-Length stays right): a host that echoes the request
// headers it got does not hand injected secrets to the sandbox.
func mask(resp *http.Response, values []string) {
	var vs [][]byte
	for _, v := range values {
		if v != "" {
			vs = append(vs, []byte(v))
		}
	}
	if len(vs) == 0 {
		return
	}
	for k, list := range resp.Header {
		for i, h := range list {
			for _, v := range vs {
				h = strings.ReplaceAll(h, string(v), strings.Repeat("*", len(v)))
			}
			resp.Header[k][i] = h
		}
	}
	resp.Body = &maskReader{r: resp.Body, values: vs}
}

// maskReader masks values in a stream, holding back at most the longest
// value's length minus one bytes so an occurrence split across reads is seen.
type maskReader struct {
	r      io.ReadCloser
	values [][]byte
	buf    []byte // read, not yet returned
	out    []byte // masked, ready to return
	eof    bool
}

// Read returns masked bytes; see maskReader.
func (m *maskReader) Read(p []byte) (int, error) {
	for len(m.out) == 0 {
		if m.eof {
			return 0, io.EOF
		}
		chunk := make([]byte, 32<<10)
		n, err := m.r.Read(chunk)
		m.buf = append(m.buf, chunk[:n]...)
		if err == io.EOF {
			m.eof = true
		} else if err != nil {
			return 0, err
		}
		m.flush()
	}
	n := copy(p, m.out)
	m.out = m.out[n:]
	return n, nil
}

// flush masks the buffer and moves what can no longer start a value to out.
func (m *maskReader) flush() {
	keep := 0
	for _, v := range m.values {
		keep = max(keep, len(v)-1)
	}
	for _, v := range m.values {
		for i := bytes.Index(m.buf, v); i >= 0; i = bytes.Index(m.buf, v) {
			copy(m.buf[i:], bytes.Repeat([]byte("*"), len(v)))
		}
	}
	cut := len(m.buf)
	if !m.eof {
		cut = max(0, len(m.buf)-keep)
	}
	m.out = append(m.out, m.buf[:cut]...)
	m.buf = append([]byte(nil), m.buf[cut:]...)
}

// Close closes the wrapped body.
func (m *maskReader) Close() error { return m.r.Close() }
