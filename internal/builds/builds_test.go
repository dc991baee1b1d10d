package builds

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/template"
)

func newService(t *testing.T) *Service {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(dir, "cubby.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := template.NewManager(filepath.Join(dir, "templates"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := template.NewBuilder(template.BuilderConfig{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: st, Manager: m, Builder: b, Dir: filepath.Join(dir, "builds"),
		MaxConcurrent: 1, DefaultCPU: 2, DefaultMemoryMB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return s
}

func TestRequestNamesAndTags(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	b, err := s.Request(ctx, RequestParams{Team: "a", Name: "app:v1", Tags: []string{"prod", "v1"}})
	if err != nil || b.TemplateID != template.IDFor("app") || strings.Join(b.Tags, ",") != "v1,prod" || b.Status != store.BuildWaiting ||
		b.CPUCount != 2 || b.MemoryMB != 1024 {
		t.Fatalf("request = %+v, %v", b, err)
	}
	if b, _ := s.Request(ctx, RequestParams{Team: "a", Name: "app"}); strings.Join(b.Tags, ",") != template.DefaultTag {
		t.Errorf("untagged request tags = %v", b.Tags)
	}
	for _, bad := range []string{"", "App", "a b", "app:bad tag", "../x"} {
		if _, err := s.Request(ctx, RequestParams{Team: "a", Name: bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("name %q: %v", bad, err)
		}
	}
	if _, err := s.Request(ctx, RequestParams{Team: "b", Name: "app"}); !errors.Is(err, ErrNameInUse) {
		t.Errorf("another team's name: %v", err)
	}
	if _, err := s.Build(ctx, "b", b.TemplateID, b.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("another team reads the build: %v", err)
	}
}

// TestStartRunsAndRecords: a started build runs in the background, its log
// and failure are recorded, it starts once, and Recover fails builds a
// restart interrupted.
func TestStartRunsAndRecords(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	b, _ := s.Request(ctx, RequestParams{Team: "a", Name: "app"})
	spec := template.Spec{From: template.Source{Template: "missing"}, Steps: []template.Step{{Type: template.StepEnv, Args: []string{"K", "v"}}}}
	if err := s.Start(ctx, "a", b.TemplateID, b.ID, template.Spec{}); !errors.Is(err, template.ErrInvalidSpec) {
		t.Errorf("empty spec: %v", err)
	}
	copyStep := template.Spec{From: spec.From, Steps: []template.Step{{Type: template.StepCopy, Args: []string{"a", "/a"}, FilesHash: strings.Repeat("a", 64)}}}
	if err := s.Start(ctx, "a", b.TemplateID, b.ID, copyStep); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "never uploaded") {
		t.Errorf("COPY without upload: %v", err)
	}
	if err := s.Start(ctx, "a", b.TemplateID, b.ID, spec); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, "a", b.TemplateID, b.ID, spec); !errors.Is(err, ErrStarted) {
		t.Errorf("second start: %v", err)
	}
	var st Status
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		st, _ = s.Status(ctx, "a", b.TemplateID, b.ID, 0, 100, "")
		if st.Build.Status == store.BuildError {
			break
		}
	}
	if st.Build.Status != store.BuildError || st.Build.ReasonStep != template.StepBase || !strings.Contains(st.Build.Reason, "not found") ||
		len(st.ReasonEntries) == 0 {
		t.Fatalf("status = %+v", st)
	}
	if page, _ := s.Status(ctx, "a", b.TemplateID, b.ID, 1, 1, ""); len(page.Entries) != 1 || page.Entries[0] != st.Entries[1] {
		t.Errorf("offset page = %+v", page.Entries)
	}
	if errs, _ := s.Status(ctx, "a", b.TemplateID, b.ID, 0, 100, template.LevelError); len(errs.Entries) != 1 {
		t.Errorf("error-level entries = %+v", errs.Entries)
	}
	b2, _ := s.Request(ctx, RequestParams{Team: "a", Name: "other"})
	s.cfg.Store.SetTemplateBuildStatus(ctx, b2.ID, store.BuildBuilding, "", "")
	if err := s.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Build(ctx, "a", b2.TemplateID, b2.ID); got.Status != store.BuildError || !strings.Contains(got.Reason, "server stopped") {
		t.Errorf("interrupted build after Recover: %+v", got)
	}
}

func TestUploads(t *testing.T) {
	s := newService(t)
	id, hash := template.IDFor("app"), strings.Repeat("ab", 32)
	if err := s.Upload(context.Background(), id, "../../etc", strings.NewReader("x")); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad hash: %v", err)
	}
	s.cfg.MaxUploadBytes = 4
	if err := s.Upload(context.Background(), id, hash, strings.NewReader("12345")); !errors.Is(err, ErrTooLarge) || s.HasFiles(id, hash) {
		t.Errorf("too large: %v", err)
	}
	if err := s.Upload(context.Background(), id, hash, strings.NewReader("1234")); err != nil || !s.HasFiles(id, hash) {
		t.Fatalf("upload: %v", err)
	}
	f, digest, err := s.files().Open(id, hash)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if digest.Hex != "03ac674216f3e15c761ee1a5e255f067953623c8b388b4459e13f978d7c846f4" { // sha256("1234")
		t.Errorf("digest %s", digest)
	}
	if _, _, err := s.files().Open(id, strings.Repeat("cd", 32)); !errors.Is(err, template.ErrFilesMissing) {
		t.Errorf("missing upload: %v", err)
	}
}
