package controlplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/egress/policy"
	"github.com/cubby-dev/cubby/internal/sandboxid"
	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/telemetry"
	"github.com/cubby-dev/cubby/internal/template"
)

// Default sandbox TTLs (docs/wire/e2b-api.md §2.3): v1 create 15 s, v2 create and connect 300 s.
const (
	defaultTimeoutV1      = 15 * time.Second
	defaultTimeoutV2      = 300 * time.Second
	defaultConnectTimeout = 300 * time.Second
	createTimeout         = 5 * time.Minute
)

// createSpec is a validated create request.
type createSpec struct {
	team      string // the caller's team, which will own the sandbox
	template  string
	ttl       time.Duration
	secure    bool
	metadata  map[string]string
	envVars   map[string]string
	allowNet  *bool
	network   json.RawMessage
	lifecycle store.Lifecycle
	traffic   bool           // trafficAccessToken required on public ports (network.allowPublicTraffic=false)
	egress    *policy.Policy // nil = none
	proxyPass string         // network.egressProxy.password, sealed when recorded
	// internalSnapshot lets template name an internal snapshot (a fork's).
	internalSnapshot bool
	// snapshot is the snapshot ID template resolved to; "" = a template.
	snapshot string
	// mounts are the create's volumeMounts, resolved into volumes by create.
	mounts     *[]api.SandboxVolumeMount
	volumes    []backend.VolumeMount
	volumeRecs []store.VolumeMount
}

// specFromBody validates a create body; secure and defTTL depend on the API version.
func (s *Service) specFromBody(b api.NewSandboxV2, secure bool, defTTL time.Duration) (createSpec, error) {
	sp := createSpec{template: s.cfg.DefaultTemplate, secure: secure, allowNet: b.AllowInternetAccess}
	if b.TemplateID != nil && *b.TemplateID != "" {
		sp.template = *b.TemplateID
	}
	ttl, err := s.ttl(b.Timeout, defTTL)
	if err != nil {
		return createSpec{}, err
	}
	if ttl == 0 {
		ttl = defTTL
	}
	sp.ttl = ttl
	if err := unsupported(b); err != nil {
		return createSpec{}, err
	}
	if sp.metadata, err = stringMap(b.Metadata, "metadata"); err != nil {
		return createSpec{}, err
	}
	if sp.envVars, err = envVars(b.EnvVars); err != nil {
		return createSpec{}, err
	}
	if sp.lifecycle, err = lifecycle(b); err != nil {
		return createSpec{}, err
	}
	ns, err := parseNetwork(b.Network, b.AllowInternetAccess)
	if err != nil {
		return createSpec{}, err
	}
	sp.egress, sp.network, sp.proxyPass = ns.policy, ns.stored, ns.password
	sp.mounts = b.VolumeMounts
	if b.Network != nil {
		sp.traffic = b.Network.AllowPublicTraffic != nil && !*b.Network.AllowPublicTraffic
	}
	return sp, nil
}

// unsupported rejects create options Cubby cannot honour rather than ignoring them.
func unsupported(b api.NewSandboxV2) error {
	switch {
	case b.Mcp != nil && len(*b.Mcp) > 0:
		return badRequest("mcp is not supported by this server")
	case b.Iam != nil && len(*b.Iam) > 0:
		return badRequest("iam is not supported by this server")
	}
	return nil
}

func stringMap[M ~map[string]string](m *M, what string) (map[string]string, error) {
	out := map[string]string{}
	if m == nil {
		return out, nil
	}
	for k, v := range *m {
		if k == "" {
			return nil, badRequest(what + " keys must not be empty")
		}
		out[k] = v
	}
	return out, nil
}

func envVars(m *api.EnvVars) (map[string]string, error) {
	out, err := stringMap(m, "envVars")
	if err != nil {
		return nil, err
	}
	for k, v := range out {
		if strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, badRequest(fmt.Sprintf("invalid environment variable %q", k))
		}
	}
	return out, nil
}

// lifecycle derives the stored lifecycle from lifecycle, autoPause, autoPauseMemory
// (default true) and autoResume (autoPause=true and autoResume.enabled override
// lifecycle).
func lifecycle(b api.NewSandboxV2) (store.Lifecycle, error) {
	l := store.Lifecycle{OnTimeout: string(api.Kill)}
	if b.Lifecycle != nil {
		if b.Lifecycle.OnTimeout != "" && !b.Lifecycle.OnTimeout.Valid() {
			return store.Lifecycle{}, badRequest(fmt.Sprintf("invalid lifecycle.onTimeout %q", b.Lifecycle.OnTimeout))
		}
		if b.Lifecycle.OnTimeout != "" {
			l.OnTimeout = string(b.Lifecycle.OnTimeout)
		}
		l.AutoResume = b.Lifecycle.AutoResume
	}
	if b.AutoPause != nil && *b.AutoPause {
		l.OnTimeout = string(api.Pause)
	}
	// Memory is kept at an automatic pause unless the client opts out.
	l.AutoPauseMemory = b.AutoPauseMemory == nil || *b.AutoPauseMemory
	if b.AutoResume != nil && b.AutoResume.Enabled {
		l.AutoResume = true
	}
	return l, nil
}

// ttl validates a timeout in seconds: nil gives def; negative or above MaxTimeout
// is a 400.
func (s *Service) ttl(sec *int32, def time.Duration) (time.Duration, error) {
	if sec == nil {
		return def, nil
	}
	if *sec < 0 {
		return 0, badRequest("timeout must not be negative")
	}
	d := time.Duration(*sec) * time.Second
	if d > s.cfg.MaxTimeout {
		return 0, badRequest(fmt.Sprintf("timeout %d s exceeds the maximum of %d s", *sec, int64(s.cfg.MaxTimeout/time.Second)))
	}
	return d, nil
}

// create starts a sandbox for sp.team and returns its record: a warm one from
// the pool when one matches, else a cold one. The team's admission comes first
// (an *admission.Error when refused). A failed backend create leaves the record
// killed with the cause as reason and returns the error.
func (s *Service) create(ctx context.Context, sp createSpec) (store.Sandbox, error) {
	ref, err := s.resolveTemplate(ctx, &sp)
	// A snapshot is the team's own: its template stays usable to it.
	if errors.Is(err, ErrTemplateNotFound) || (err == nil && sp.snapshot == "" && !ref.visibleTo(sp.team)) {
		return store.Sandbox{}, &httpError{status: 404, msg: templateNotFound(sp.template)}
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("resolve template %q: %w", sp.template, err)
	}
	if err := s.checkSecrets(ctx, sp.team, sp.egress); err != nil {
		return store.Sandbox{}, err
	}
	if sp.volumes, sp.volumeRecs, err = s.volumeMounts(ctx, sp.team, sp.mounts); err != nil {
		return store.Sandbox{}, err
	}
	if sp.lifecycle.OnTimeout == string(api.Pause) && !s.canPause() {
		return store.Sandbox{}, badRequest("lifecycle onTimeout pause (autoPause) is not supported by this server: " +
			"its backend cannot pause sandboxes, and a sandbox is never killed in place of a pause")
	}
	began := time.Now()
	rec := s.newRecord(sp, ref)
	ticket, err := s.admit.Admit(recordTeam(rec), rec.MemoryMB)
	if err != nil {
		return store.Sandbox{}, err
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	in, err := s.startInstance(bctx, &rec, ref, sp)
	defer s.setCreating(rec.ID, false)
	if err != nil {
		ticket.Release()
		s.metrics.ObserveCreate(ref.ID, telemetry.OutcomeError, time.Since(began))
		return store.Sandbox{}, err
	}
	rec.StartedAt = time.Now().UTC().Truncate(time.Millisecond)
	rec.EndAt, rec.Addr, rec.Runtime = rec.StartedAt.Add(sp.ttl), in.Addr, in.Runtime
	if err := s.store.MarkStarted(bctx, rec.ID, rec.Addr, rec.Runtime, rec.StartedAt, rec.EndAt); err != nil {
		_ = s.backend.Kill(bctx, rec.ID)
		s.failCreate(bctx, rec.ID, err)
		ticket.Release()
		s.metrics.ObserveCreate(ref.ID, telemetry.OutcomeError, time.Since(began))
		return store.Sandbox{}, fmt.Errorf("record sandbox start: %w", err)
	}
	sb := newSandbox(rec, in, ticket, s.ringSize)
	s.register(sb)
	s.sampleOne(bctx, sb)
	s.metrics.ObserveCreate(ref.ID, telemetry.OutcomeOK, time.Since(began))
	s.log.Info("sandbox created", "sandbox", rec.ID, "template", ref.ID, "ttl", sp.ttl)
	return rec, nil
}

// resolveTemplate resolves sp.template: a template, else a snapshot of
// sp.team (sp.snapshot is then set), whose sandboxes run the snapshot's
// template. Errors wrap ErrTemplateNotFound when neither exists.
func (s *Service) resolveTemplate(ctx context.Context, sp *createSpec) (TemplateRef, error) {
	ref, err := s.templates.Resolve(ctx, sp.template)
	if !errors.Is(err, ErrTemplateNotFound) {
		return ref, err
	}
	sn, serr := s.findSnapshot(ctx, sp.team, sp.template)
	if errors.Is(serr, store.ErrNotFound) || serr == nil && sn.Internal && !sp.internalSnapshot {
		return TemplateRef{}, err
	}
	if serr != nil {
		return TemplateRef{}, serr
	}
	ref, err = s.templates.Resolve(ctx, sn.TemplateID)
	if err != nil {
		return TemplateRef{}, fmt.Errorf("template of snapshot %s: %w", sn.ID, err)
	}
	if !sn.Internal {
		ref.Alias = viewSnapshot(sn).SnapshotID
	}
	sp.snapshot = sn.ID
	return ref, nil
}

// templateNotFound explains a missing template; for a built-in one (such as
// code-interpreter-v1, the code-interpreter SDKs' default) it says how to build it.
func templateNotFound(name string) string {
	msg := fmt.Sprintf("template '%s' not found", name)
	if b, ok := template.BuiltinFor(name); ok {
		msg += fmt.Sprintf(": it is Cubby's built-in %q template, not built on this server yet; "+
			"build it on the server host with `cubby template build %s` (a few minutes, once)", b, b)
	}
	return msg
}

// startInstance claims a warm sandbox for rec (whose ID then becomes the warm
// sandbox's) or boots one, and records it in the store. A warm sandbox is
// claimed before its record exists; should the server die in between, the
// backend's recovery sweeps it as unknown.
func (s *Service) startInstance(ctx context.Context, rec *store.Sandbox, ref TemplateRef, sp createSpec) (backend.Instance, error) {
	req := s.createRequest(*rec, ref, sp)
	if s.pool != nil && sp.snapshot == "" && len(req.Volumes) == 0 {
		if in, ok := s.pool.Claim(ctx, req); ok {
			rec.ID = in.SandboxID
			s.setCreating(rec.ID, true)
			err := s.store.InsertSandbox(ctx, *rec)
			if err == nil {
				err = s.saveNetworkSecret(ctx, *rec, sp.proxyPass)
			}
			if err != nil {
				_ = s.backend.Kill(ctx, in.SandboxID)
				return backend.Instance{}, storeUnavailable(err)
			}
			return in, nil
		}
	}
	s.setCreating(rec.ID, true)
	if err := s.store.InsertSandbox(ctx, *rec); err != nil {
		return backend.Instance{}, storeUnavailable(err)
	}
	if err := s.saveNetworkSecret(ctx, *rec, sp.proxyPass); err != nil {
		s.failCreate(ctx, rec.ID, err)
		return backend.Instance{}, err
	}
	in, err := s.backend.Create(ctx, req)
	if err != nil {
		s.failCreate(ctx, rec.ID, err)
		return backend.Instance{}, fmt.Errorf("create sandbox: %w", err)
	}
	return in, nil
}

// PoolRequest is the create request a warm sandbox of template boots with:
// the server's sandbox defaults, internet access, and an init with the
// template's environment but no tokens (a claim sends the real ones). Errors:
// the template's.
func (s *Service) PoolRequest(ctx context.Context, template string) (backend.CreateRequest, error) {
	ref, err := s.templates.Resolve(ctx, template)
	if err != nil {
		return backend.CreateRequest{}, fmt.Errorf("resolve template %q: %w", template, err)
	}
	return s.SandboxRequest(ref), nil
}

// SandboxRequest is the create request a sandbox of ref boots with by
// default (the server's boot options, CPU, memory, disk, CA bundle and
// sandbox environment, internet access) without credentials: what warm
// sandboxes boot with, and the template build's finalize sandbox whose ready
// state it snapshots (template.ReadySnapshots). SandboxID is a fresh one.
func (s *Service) SandboxRequest(ref TemplateRef) backend.CreateRequest {
	sp := createSpec{template: ref.ID}
	req := s.createRequest(s.newRecord(sp, ref), ref, sp)
	req.Init.AccessToken, req.Init.TrafficAccessToken = "", "" // a claim sends the sandbox's own; its env vars keep the template's
	return req
}

// storeUnavailable answers a failed insert of a new record (random IDs do not
// collide: the store cannot be written) with 503, nothing having started.
func storeUnavailable(err error) error {
	return &httpError{status: http.StatusServiceUnavailable, msg: "cannot record the sandbox: " + err.Error()}
}

// canPause reports whether the backend can pause sandboxes at all.
func (s *Service) canPause() bool {
	p, ok := s.backend.(pauser)
	return !ok || p.CanPause()
}

func (s *Service) failCreate(ctx context.Context, id string, cause error) {
	s.metrics.SandboxKilled(killLabelCreateFailed)
	s.log.Error("sandbox create failed", "sandbox", id, "err", cause)
	if err := s.store.MarkKilled(ctx, id, time.Now(), "create failed: "+cause.Error()); err != nil {
		s.log.Error("record failed create", "sandbox", id, "err", err)
	}
	s.dropKilledSecrets(ctx)
}

func (s *Service) newRecord(sp createSpec, ref TemplateRef) store.Sandbox {
	now := time.Now().UTC().Truncate(time.Millisecond)
	rec := store.Sandbox{
		ID: sandboxid.New(), Team: sp.team, TemplateID: ref.ID, TemplateAlias: ref.Alias,
		Metadata: sp.metadata, EnvVars: sp.envVars,
		CPUCount: s.cfg.DefaultCPU, MemoryMB: s.cfg.DefaultMemoryMB, DiskSizeMB: s.cfg.DefaultDiskMB,
		StartedAt: now, EndAt: now.Add(sp.ttl), State: store.StateRunning, Secure: sp.secure,
		AllowInternetAccess: sp.allowNet, Network: sp.network, Lifecycle: sp.lifecycle,
		VolumeMounts: sp.volumeRecs,
	}
	if sp.secure {
		rec.AccessToken = newToken()
	}
	if sp.secure || sp.traffic {
		// The code interpreter of a secured sandbox takes the traffic token as
		// the official SDKs' credential on its code-context routes.
		rec.TrafficToken = newToken()
	}
	rec.PrivateTraffic = sp.traffic
	return rec
}

func (s *Service) createRequest(rec store.Sandbox, ref TemplateRef, sp createSpec) backend.CreateRequest {
	req := backend.CreateRequest{
		SandboxID: rec.ID, TemplateID: ref.ID, RootfsDir: ref.RootfsDir, Runtime: ref.Runtime,
		CPUCount: rec.CPUCount, MemoryMB: rec.MemoryMB, DiskSizeMB: rec.DiskSizeMB,
		NoInternet: sp.allowNet != nil && !*sp.allowNet || sp.egress.BlocksAll(),
		Egress:     sp.egress,
		Boot:       s.cfg.Boot,
		Snapshot:   sp.snapshot,
		Volumes:    sp.volumes,
		Team:       recordTeam(rec), Metadata: rec.Metadata, Deadline: rec.EndAt,
		Init: agentapi.InitRequest{
			// The agent takes only the link credential: the gateway checks
			// the clients' tokens (agentapi.LinkToken).
			EnvVars: s.sandboxEnv(ref, sp.envVars), AccessToken: agentapi.LinkToken(rec.AccessToken),
			DefaultUser: cmp.Or(ref.User, agentapi.DefaultUser), DefaultWorkdir: cmp.Or(ref.Workdir, agentapi.DefaultWorkdir), Timestamp: time.Now(),
		},
	}
	if s.cfg.Outbound.CABundle != "" {
		req.CABundle = s.cfg.Outbound.CABundle
	}
	if ref.StartCmd != "" || ref.ReadyCmd != "" {
		req.Start = &backend.StartCommand{Cmd: cmp.Or(ref.StartCmd, "true"), ReadyCmd: ref.ReadyCmd}
	}
	if req.Snapshot == "" && ref.StartCmd != "" {
		if why := s.readySnapshotUnusable(ref, req); why != "" {
			s.log.Info("sandbox runs its template's start command at create", "sandbox", rec.ID, "template", ref.ID, "why", why)
		} else {
			req.Snapshot = ref.Snapshot
			s.log.Info("sandbox restores its template's memory snapshot, start command running", "sandbox", rec.ID, "template", ref.ID, "snapshot", ref.Snapshot)
		}
	}
	return req
}

// runtimeNamer is a backend that says which runtime a request naming none gets.
type runtimeNamer interface{ DefaultRuntime() string }

// readySnapshotUnusable says why a sandbox created with req cannot restore
// ref's ready snapshot (the start command then runs at create), "" when it
// can: the snapshot holds the memory of a sandbox without volumes under
// ref.SnapshotRuntime.
func (s *Service) readySnapshotUnusable(ref TemplateRef, req backend.CreateRequest) string {
	rt := req.Runtime
	if n, ok := s.backend.(runtimeNamer); ok && rt == "" {
		rt = n.DefaultRuntime()
	}
	switch {
	case ref.Snapshot == "":
		return "the template has no memory snapshot (its runtime cannot checkpoint, or it was built before)"
	case rt != ref.SnapshotRuntime:
		return fmt.Sprintf("the template's memory snapshot was taken under %s, this sandbox runs under %q", ref.SnapshotRuntime, rt)
	case len(req.Volumes) > 0:
		return "the template's memory snapshot was taken without volumes"
	}
	return ""
}

// sandboxEnv layers a sandbox's environment: the template's variables, the
// egress proxy and CA variables when the operator passes them to
// sandboxes, then the create request's envVars.
func (s *Service) sandboxEnv(ref TemplateRef, create map[string]string) map[string]string {
	env := map[string]string{}
	maps.Copy(env, ref.Env)
	maps.Copy(env, s.cfg.Outbound.ProxyEnv)
	if s.cfg.Outbound.CABundle != "" {
		maps.Copy(env, agentapi.CAEnv())
	}
	maps.Copy(env, create)
	return env
}
