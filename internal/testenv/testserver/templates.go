package testserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// TemplateBuild is a build requested through the template build API.
type TemplateBuild struct {
	TemplateID string `json:"templateID"`
	BuildID    string `json:"buildID"`
}

// BuildResult is a finished build's status and log.
type BuildResult struct {
	Status  string   // "ready" or "error"
	Reason  string   // reason.message when failed
	Step    string   // reason.step when failed
	Log     []string // every log entry's message, in order
	Entries int      // how many entries the status polls returned in total
}

// LogText is the whole log, one entry per line.
func (r BuildResult) LogText() string { return strings.Join(r.Log, "\n") }

// Upload makes the files of a COPY step available for template tid the way
// the SDKs do (GET the files link, PUT the archive to it) and returns the
// files hash to name in the step (the archive's sha256).
func (s *Server) Upload(ctx context.Context, tid string, archive []byte) (string, error) {
	sum := sha256.Sum256(archive)
	hash := hex.EncodeToString(sum[:])
	var link struct {
		Present bool   `json:"present"`
		URL     string `json:"url"`
	}
	code, err := s.API(ctx, http.MethodGet, "/templates/"+tid+"/files/"+hash, nil, &link)
	if err != nil || code != http.StatusCreated {
		return "", fmt.Errorf("files link: %d %v", code, err)
	}
	if link.Present {
		return hash, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, link.URL, bytes.NewReader(archive))
	if err != nil {
		return "", err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("upload: %d", resp.StatusCode)
	}
	return hash, nil
}

// RequestBuild requests a build of name ("name" or "name:tag").
func (s *Server) RequestBuild(ctx context.Context, name string) (TemplateBuild, error) {
	var b TemplateBuild
	code, err := s.API(ctx, http.MethodPost, "/v3/templates", map[string]any{"name": name, "cpuCount": 2, "memoryMB": 1024}, &b)
	if err != nil || code != http.StatusAccepted {
		return b, fmt.Errorf("request build of %s: %d %v", name, code, err)
	}
	return b, nil
}

// StartBuild posts the build body (fromImage/fromTemplate, steps, …) and
// returns the HTTP status and error message.
func (s *Server) StartBuild(ctx context.Context, b TemplateBuild, body map[string]any) (int, string, error) {
	var e struct {
		Message string `json:"message"`
	}
	code, err := s.API(ctx, http.MethodPost, "/v2/templates/"+b.TemplateID+"/builds/"+b.BuildID, body, &e)
	return code, e.Message, err
}

// WaitBuild polls the build status as the SDKs do (logsOffset, every 200
// ms) until it is ready or failed and every log entry was read.
func (s *Server) WaitBuild(ctx context.Context, b TemplateBuild) (BuildResult, error) {
	var res BuildResult
	for {
		var st struct {
			Status     string `json:"status"`
			LogEntries []struct {
				Message string `json:"message"`
			} `json:"logEntries"`
			Reason *struct {
				Message string `json:"message"`
				Step    string `json:"step"`
			} `json:"reason"`
		}
		path := fmt.Sprintf("/templates/%s/builds/%s/status?logsOffset=%d", b.TemplateID, b.BuildID, res.Entries)
		if code, err := s.API(ctx, http.MethodGet, path, nil, &st); err != nil || code != http.StatusOK {
			return res, fmt.Errorf("build status: %d %v", code, err)
		}
		for _, e := range st.LogEntries {
			res.Log = append(res.Log, e.Message)
		}
		res.Entries += len(st.LogEntries)
		if (st.Status == "ready" || st.Status == "error") && len(st.LogEntries) == 0 {
			res.Status = st.Status
			if st.Reason != nil {
				res.Reason, res.Step = st.Reason.Message, st.Reason.Step
			}
			return res, nil
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("build %s: %w (log so far:\n%s)", b.BuildID, ctx.Err(), res.LogText())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Build requests, starts and waits for a build of name with body.
func (s *Server) Build(ctx context.Context, name string, body map[string]any) (TemplateBuild, BuildResult, error) {
	b, err := s.RequestBuild(ctx, name)
	if err != nil {
		return b, BuildResult{}, err
	}
	code, msg, err := s.StartBuild(ctx, b, body)
	if err != nil || code != http.StatusAccepted {
		return b, BuildResult{}, fmt.Errorf("start build: %d %s %v", code, msg, err)
	}
	res, err := s.WaitBuild(ctx, b)
	return b, res, err
}

// As returns a view of the server whose API calls (API, Upload and the
// build helpers) use key instead of the server's own (another team's key).
// The view cannot start, stop or restart the server.
func (s *Server) As(key string) *Server {
	return &Server{Bin: s.Bin, Addr: s.Addr, Key: key, DataDir: s.DataDir, TemplatesDir: s.TemplatesDir,
		Bridge: s.Bridge, Subnet: s.Subnet, LogPath: s.LogPath, client: s.client}
}
