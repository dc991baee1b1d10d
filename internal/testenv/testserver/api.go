package testserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// API calls the control plane (E2B wire REST API) with the server's key in
// X-API-KEY. body, if non-nil, is sent as JSON; out, if non-nil, receives the
// JSON response body (left untouched when the body is empty). It returns the
// HTTP status. Errors: the request fails, or the body does not decode into out.
func (s *Server) API(ctx context.Context, method, path string, body, out any) (int, error) {
	resp, data, err := s.Call(ctx, s.Key, method, path, body)
	if err != nil {
		return 0, err
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode %q: %w", method, path, data, err)
		}
	}
	return resp.StatusCode, nil
}

// Call is API with key in X-API-KEY ("" sends none); it returns the response
// (its body already read and closed) and the body. Errors: as CallURL.
func (s *Server) Call(ctx context.Context, key, method, path string, body any) (*http.Response, []byte, error) {
	return CallURL(ctx, s.client, key, method, s.URL(path), body)
}

// CallURL sends an E2B REST API request through client to url (any server or
// replica) with key in X-API-KEY ("" sends none) and body, if non-nil, as
// JSON; it returns the response (its body already read and closed) and the
// body. Errors: body does not encode, the request fails or its body cannot
// be read.
func CallURL(ctx context.Context, client *http.Client, key, method, url string, body any) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: encode body: %w", method, url, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	return resp, data, nil
}

// Metric returns the value of the first sample on the server's GET /metrics
// whose line (name{labels} value) matches pattern, or -1 when none does.
// Errors: the scrape fails or pattern does not compile.
func (s *Server) Metric(ctx context.Context, pattern string) (float64, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return 0, fmt.Errorf("metric pattern: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL("/metrics"), nil)
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "#") && re.MatchString(line) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v, nil
		}
	}
	return -1, sc.Err()
}

// VolumeContent calls the volume content API of volume id
// (/volumecontent/{id}/{op}?{query}) with token as its bearer token and body
// (nil = none) as the raw request body; it returns the status and the
// response body. Errors: the request fails or its body cannot be read.
func (s *Server) VolumeContent(ctx context.Context, id, token, method, op, query string, body io.Reader) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.URL("/volumecontent/"+id+"/"+op+"?"+query), body)
	if err != nil {
		return 0, "", fmt.Errorf("%s %s: %w", method, op, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("%s %s: %w", method, op, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", fmt.Errorf("%s %s: read body: %w", method, op, err)
	}
	return resp.StatusCode, string(data), nil
}
