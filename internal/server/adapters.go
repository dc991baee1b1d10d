package server

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cubby-dev/cubby/internal/controlplane"
	"github.com/cubby-dev/cubby/internal/gateway"
	"github.com/cubby-dev/cubby/internal/telemetry"
	"github.com/cubby-dev/cubby/internal/template"
)

// ensureTemplate builds a built-in template on first start when it is
// missing, printing the build log to progress. Each build is counted in
// cubby_template_builds_total.
func ensureTemplate(ctx context.Context, b *template.Builder, tm *template.Manager, name string, progress io.Writer, tel *telemetry.Metrics) error {
	if _, err := tm.Get(name); err == nil {
		return nil
	} else if !errors.Is(err, template.ErrNotFound) {
		return fmt.Errorf("look up template %s: %w", name, err)
	}
	def, ok := template.Builtin(name)
	if !ok {
		return fmt.Errorf("default template %q is not built and is not a built-in; build it with `cubby template build`", name)
	}
	fmt.Fprintf(progress, "Template %q is not built yet; building it now (first start only).\n", name)
	print := func(e template.Entry) { fmt.Fprintln(progress, e.String()) }
	if _, err := buildDefinition(ctx, b, def, print, false); err != nil {
		tel.TemplateBuilt(telemetry.OutcomeError)
		return fmt.Errorf("build template %s: %w", name, err)
	}
	tel.TemplateBuilt(telemetry.OutcomeOK)
	return nil
}

// builtinBuildMemoryMB is the memory limit of the build sandboxes of
// definitions built on the host (built-ins, `cubby template build`): twice a
// sandbox's default, for package installs.
const builtinBuildMemoryMB = 2 * DefaultMemoryMB

// buildDefinition builds a cubby-template.yaml definition with b, passing
// its log entries to progress (may be nil).
func buildDefinition(ctx context.Context, b *template.Builder, def template.Definition, progress func(template.Entry), force bool) (template.Info, error) {
	spec, files, err := def.Spec()
	if err != nil {
		return template.Info{}, err
	}
	spec.Force = force
	return b.Build(ctx, template.Request{
		TemplateID: template.IDFor(def.Name), Name: def.Name, Aliases: def.Aliases, BuildID: template.NewBuildID(),
		Spec: spec, CPUCount: DefaultCPUCount, MemoryMB: builtinBuildMemoryMB, Files: files,
		Log: progress,
	})
}

// routes adapts the control plane's in-memory sandbox table to the gateway.
type routes struct{ cp *controlplane.Service }

func (r routes) Resolve(id string) (gateway.Target, bool) {
	rt, ok := r.cp.Route(id)
	if !ok {
		return gateway.Target{}, false
	}
	return target(id, rt), true
}

// target converts a control-plane route of sandbox id for the gateway.
func target(id string, rt controlplane.Route) gateway.Target {
	return gateway.Target{ID: id, Addr: rt.Addr, HostIface: rt.HostIface, Running: rt.Running,
		AccessToken: rt.AccessToken, TrafficToken: rt.TrafficToken, InterpreterToken: rt.InterpreterToken,
		MaskRequestHost: rt.MaskRequestHost, HTTPSPorts: rt.HTTPSPorts}
}

// Wake lets traffic resume paused sandboxes with lifecycle autoResume (gateway.Waker).
func (r routes) Wake(ctx context.Context, id string) (gateway.Target, bool, error) {
	rt, ok, err := r.cp.Wake(ctx, id)
	if err != nil || !ok {
		return gateway.Target{}, false, err
	}
	return target(id, rt), true, nil
}

func (r routes) Targets() []gateway.Target {
	all := r.cp.Routes()
	out := make([]gateway.Target, 0, len(all))
	for _, rt := range all {
		out = append(out, target(rt.ID, rt.Route))
	}
	return out
}
