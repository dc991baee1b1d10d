package template

import (
	"context"
	"fmt"
	goruntime "runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
)

// finalize checks the start and ready commands in a sandbox of the finished
// tree, as sandboxes of the template will run them: the build fails when
// the ready command does not succeed. With ReadySnapshots the sandbox boots
// as the template's sandboxes will and, once ready, is captured as the
// build's ready snapshot.
func (r *run) finalize(ctx context.Context) error {
	spec := r.req.Spec
	if spec.StartCmd == "" && spec.ReadyCmd == "" {
		return nil
	}
	cmd := spec.StartCmd
	if cmd == "" {
		cmd = "true" // a ready command alone: checked without a start command
	}
	r.logf(LevelInfo, StepFinalize, "[finalize] start command: %s; waiting for: %s", describeCmd(cmd), describeCmd(spec.ReadyCmd))
	if r.b.cfg.Sandboxes == nil || r.b.cfg.NewSandboxID == nil {
		return fmt.Errorf("this builder cannot check start commands (no sandbox backend)")
	}
	req, snap := r.readyRequest(cmd)
	req.SandboxID = r.b.cfg.NewSandboxID()
	began := time.Now()
	in, err := r.b.cfg.Sandboxes.Create(ctx, req)
	defer r.kill(ctx, &buildBox{id: req.SandboxID})
	if err != nil {
		return err
	}
	r.logf(LevelInfo, StepFinalize, "[finalize] ready after %s", time.Since(began).Round(100*time.Millisecond))
	if snap {
		r.snapshotReady(ctx, req.SandboxID, in.Runtime)
	}
	return nil
}

// readyRequest is the create request of the finalize sandbox: as the
// template's sandboxes boot (snap true) when there is a start command and
// the builder's ReadySnapshots can snapshot it, else (logged) a build
// sandbox with the build's environment, as without ReadySnapshots.
func (r *run) readyRequest(cmd string) (backend.CreateRequest, bool) {
	spec := r.req.Spec
	start := &backend.StartCommand{Cmd: cmd, ReadyCmd: spec.ReadyCmd}
	if rs := r.b.cfg.ReadySnapshots; rs != nil && spec.StartCmd != "" {
		req, err := rs.Request(SandboxTemplate{ID: r.req.TemplateID, RootfsDir: r.st.tree, Runtime: spec.Runtime,
			User: r.st.user, Workdir: r.st.workdir, Env: copyEnv(r.st.env), StartCmd: spec.StartCmd, ReadyCmd: spec.ReadyCmd})
		if err == nil {
			req.Start = start
			return req, true
		}
		r.logf(LevelInfo, StepFinalize, "[finalize] %v: sandboxes of this template run the start command at create", err)
	}
	env := copyEnv(r.st.env)
	for k, v := range r.b.cfg.Outbound.ProxyEnv {
		env[k] = v
	}
	if r.b.cfg.Outbound.CABundle != "" {
		for k, v := range agentapi.CAEnv() {
			env[k] = v
		}
	}
	return backend.CreateRequest{
		TemplateID: r.req.TemplateID, RootfsDir: r.st.tree, Runtime: spec.Runtime,
		CPUCount: max(r.req.CPUCount, 1), MemoryMB: max(r.req.MemoryMB, 1024), DiskSizeMB: r.b.cfg.DiskMB,
		Boot:     agentapi.BootOptions{NoInterpreter: true},
		Init:     agentapi.InitRequest{EnvVars: env, DefaultUser: r.st.user, DefaultWorkdir: r.st.workdir, Timestamp: time.Now()},
		CABundle: r.b.cfg.Outbound.CABundle,
		Start:    start,
	}, false
}

// publish writes the build's OCI config and manifest and points its tags at it.
func (r *run) publish(ctx context.Context) (Info, error) {
	spec := r.req.Spec
	labels := map[string]string{}
	for k, v := range map[string]string{labelStartCmd: spec.StartCmd, labelReadyCmd: spec.ReadyCmd, labelRuntime: spec.Runtime} {
		if v != "" {
			labels[k] = v
		}
	}
	if !r.st.shippable {
		labels[labelShippable] = "false"
	}
	cfg := v1.ConfigFile{
		Architecture: goruntime.GOARCH, OS: "linux", Created: v1.Time{Time: time.Now().UTC()},
		Config: v1.Config{Env: r.st.envList(), User: r.st.user, WorkingDir: r.st.workdir, Labels: labels},
		RootFS: v1.RootFS{Type: "layers"},
	}
	man := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for _, l := range r.st.layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.DiffID)
		man.Layers = append(man.Layers, l.Descriptor())
	}
	if r.st.tree != r.b.m.treeDir(r.st.chain) { // a legacy tree, unchanged: give it a tree of its own
		if err := r.b.m.adopt(ctx, r.st); err != nil {
			return Info{}, err
		}
	}
	st := r.b.m.store
	cdesc, err := st.WriteJSON(ctx, cfg, types.OCIConfigJSON)
	if err != nil {
		return Info{}, err
	}
	man.Config = cdesc
	mdesc, err := st.WriteJSON(ctx, man, types.OCIManifestSchema1)
	if err != nil {
		return Info{}, err
	}
	size, err := treeSize(r.st.tree)
	if err != nil {
		return Info{}, err
	}
	err = r.b.m.publish(ctx, publication{
		ID: r.req.TemplateID, Name: r.req.Name, Team: r.req.Team, Aliases: r.req.Aliases, BuildID: r.req.BuildID, Manifest: mdesc,
		Tree: r.st.chain, SizeBytes: size, CPUCount: r.req.CPUCount, MemoryMB: r.req.MemoryMB, Tags: r.req.Tags,
		Ready: r.ready,
	})
	if err != nil {
		return Info{}, err
	}
	return r.b.m.Get(r.req.TemplateID + ":" + r.req.Tags[0])
}
