package builds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/template"
)

// RequestParams is a build request (E2B POST /v3/templates).
type RequestParams struct {
	Team     string   // the requesting team, which owns the template
	Name     string   // "name" or "name:tag"
	Tags     []string // further tags
	CPUCount int      // 0 = the default
	MemoryMB int      // 0 = the default
}

// Request records a build of template params.Name (its ID is
// template.IDFor(name)) and returns it, waiting to be started. Errors wrap
// ErrInvalid (bad name or tag) or ErrNameInUse (an alias of another template).
func (s *Service) Request(ctx context.Context, p RequestParams) (store.TemplateBuild, error) {
	name, tag, hasTag := strings.Cut(p.Name, ":")
	if !template.ValidName(name) {
		return store.TemplateBuild{}, fmt.Errorf("%w: name %q must be 1-63 characters of a-z, 0-9, _ and -, starting with a letter or digit", ErrInvalid, name)
	}
	tags := p.Tags
	if hasTag {
		tags = append([]string{tag}, tags...)
	}
	for _, t := range tags {
		if !template.ValidTag(t) {
			return store.TemplateBuild{}, fmt.Errorf("%w: tag %q must be 1-128 characters of A-Z, a-z, 0-9, _, . and -", ErrInvalid, t)
		}
	}
	if len(tags) == 0 {
		tags = []string{template.DefaultTag}
	}
	id := template.IDFor(name)
	if err := s.checkOwner(ctx, p.Team, name, id); err != nil {
		return store.TemplateBuild{}, err
	}
	if p.CPUCount <= 0 {
		p.CPUCount = s.cfg.DefaultCPU
	}
	if p.MemoryMB <= 0 {
		p.MemoryMB = s.cfg.DefaultMemoryMB
	}
	now := time.Now().UTC()
	b := store.TemplateBuild{ID: template.NewBuildID(), TemplateID: id, Team: p.Team, Name: name, Tags: dedup(tags), Status: store.BuildWaiting,
		CPUCount: p.CPUCount, MemoryMB: p.MemoryMB, CreatedAt: now, UpdatedAt: now}
	if err := s.cfg.Store.InsertTemplateBuild(ctx, b); err != nil {
		return store.TemplateBuild{}, err
	}
	return b, nil
}

// checkOwner fails with ErrNameInUse unless name is free or team's: an
// alias of another template, a template of another team (built or
// requested), or a built-in is not.
func (s *Service) checkOwner(ctx context.Context, team, name, id string) error {
	if info, err := s.cfg.Manager.Get(name); err == nil {
		switch {
		case info.ID != id:
			return fmt.Errorf("%w: %q is an alias of template %s (%s)", ErrNameInUse, name, info.Name, info.ID)
		case info.Team != team && info.Team == "":
			return fmt.Errorf("%w: %q is a template of this server (built-in); choose another name", ErrNameInUse, name)
		case info.Team != team:
			return fmt.Errorf("%w: %q belongs to another team", ErrNameInUse, name)
		}
		return nil
	}
	owner, ok, err := s.cfg.Store.TemplateBuildTeam(ctx, id)
	if err != nil {
		return err
	}
	if ok && owner != team {
		return fmt.Errorf("%w: %q belongs to another team", ErrNameInUse, name)
	}
	return nil
}

func dedup(list []string) []string {
	var out []string
	for _, s := range list {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Build returns build buildID of template templateID when team requested
// it. Errors wrap ErrNotFound (also for another team's build).
func (s *Service) Build(ctx context.Context, team, templateID, buildID string) (store.TemplateBuild, error) {
	b, err := s.cfg.Store.GetTemplateBuild(ctx, buildID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (b.TemplateID != templateID || b.Team != team)) {
		return store.TemplateBuild{}, fmt.Errorf("build %s of template %s: %w", buildID, templateID, ErrNotFound)
	}
	return b, err
}

// Start starts requested build buildID with spec; it runs in the background.
// Errors wrap ErrNotFound, ErrStarted, template.ErrInvalidSpec, ErrInvalid
// (a COPY whose files were never uploaded) or ErrShutdown.
func (s *Service) Start(ctx context.Context, team, templateID, buildID string, spec template.Spec) error {
	b, err := s.Build(ctx, team, templateID, buildID)
	if err != nil {
		return err
	}
	if err := spec.Validate(); err != nil {
		return err // wraps template.ErrInvalidSpec
	}
	for i, st := range spec.Steps {
		if st.Type == template.StepCopy && !s.HasFiles(b.TemplateID, st.FilesHash) {
			return fmt.Errorf("%w: steps[%d]: the files of COPY %s were never uploaded (filesHash %s): upload them through GET /templates/%s/files/%s first",
				ErrInvalid, i, st.Args[0], st.FilesHash, b.TemplateID, st.FilesHash)
		}
	}
	ok, err := s.cfg.Store.StartTemplateBuild(ctx, buildID)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("build %s: %w", buildID, ErrStarted)
	}
	return s.launch(b, spec)
}

// job is a started build.
type job struct {
	rec    store.TemplateBuild
	spec   template.Spec
	ctx    context.Context
	cancel context.CancelFunc
	log    *buildLog
}

func (s *Service) launch(b store.TemplateBuild, spec template.Spec) error {
	l := &buildLog{}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrShutdown
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &job{rec: b, spec: spec, ctx: ctx, cancel: cancel, log: l}
	s.jobs[b.ID] = j
	s.wg.Add(1)
	go s.run(j)
	return nil
}

// run waits for a build slot, builds and records the outcome.
func (s *Service) run(j *job) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.jobs, j.rec.ID)
		s.mu.Unlock()
		j.cancel()
	}()
	if !s.acquireSlot(j) {
		s.finish(j, template.Info{}, &template.StepError{ExitCode: -1, Err: errors.New(errCancelled)})
		return
	}
	defer func() { <-s.slots }()
	s.setStatus(j, store.BuildBuilding)
	info, err := s.cfg.Builder.Build(j.ctx, template.Request{
		TemplateID: j.rec.TemplateID, Name: j.rec.Name, Team: j.rec.Team, BuildID: j.rec.ID, Tags: j.rec.Tags, Spec: j.spec,
		CPUCount: j.rec.CPUCount, MemoryMB: j.rec.MemoryMB, Files: s.files(), Log: j.log.Add,
		Waiting: func(waiting bool) {
			if waiting {
				s.setStatus(j, store.BuildWaiting)
			} else {
				s.setStatus(j, store.BuildBuilding)
			}
		},
	})
	if err != nil && j.ctx.Err() != nil {
		err = &template.StepError{Step: stepOf(err), ExitCode: -1, Err: errors.New(errCancelled)}
	}
	s.finish(j, info, err)
}

// acquireSlot takes a build slot, logging the wait when none is free;
// false when the job was cancelled meanwhile.
func (s *Service) acquireSlot(j *job) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
	}
	j.log.Add(template.Entry{Time: time.Now().UTC(), Level: template.LevelInfo,
		Message: fmt.Sprintf("Waiting for another build to finish (%d at once)", s.cfg.MaxConcurrent)})
	select {
	case s.slots <- struct{}{}:
		return true
	case <-j.ctx.Done():
		return false
	}
}

func stepOf(err error) string {
	var se *template.StepError
	if errors.As(err, &se) {
		return se.Step
	}
	return ""
}

func (s *Service) setStatus(j *job, st store.BuildStatus) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.cfg.Store.SetTemplateBuildStatus(ctx, j.rec.ID, st, "", ""); err != nil {
		s.log.Error("record template build status", "build", j.rec.ID, "err", err)
	}
}

// finish records the build's outcome and logs it.
func (s *Service) finish(j *job, info template.Info, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err == nil {
		if serr := s.cfg.Store.SetTemplateBuildStatus(ctx, j.rec.ID, store.BuildReady, "", ""); serr != nil {
			s.log.Error("record template build ready", "build", j.rec.ID, "err", serr)
		}
		s.log.Info("template built", "template", j.rec.TemplateID, "name", j.rec.Name, "build", j.rec.ID, "digest", info.Digest)
		if s.cfg.OnDone != nil {
			s.cfg.OnDone(info, nil)
		}
		return
	}
	if s.cfg.OnDone != nil {
		s.cfg.OnDone(info, err)
	}
	step := stepOf(err)
	if serr := s.cfg.Store.SetTemplateBuildStatus(ctx, j.rec.ID, store.BuildError, err.Error(), step); serr != nil {
		s.log.Error("record template build failure", "build", j.rec.ID, "err", serr)
	}
	s.log.Warn("template build failed", "template", j.rec.TemplateID, "name", j.rec.Name, "build", j.rec.ID, "step", step, "err", err)
}
