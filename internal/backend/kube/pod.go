package kube

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
)

// podFor returns the Pod of a create request in pool state state (StateClaimed
// for a cold create, StateBooting for a warm one). Errors: no image for the
// template (backend.ErrInvalid), metadata that does not encode.
func (b *Backend) podFor(req backend.CreateRequest, state string) (*corev1.Pod, error) {
	image, ok := b.cfg.Images[req.TemplateID]
	if !ok {
		return nil, fmt.Errorf("template %s has no image on this server (--template-image): %w", req.TemplateID, backend.ErrInvalid)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: podName(req.SandboxID), Namespace: b.cfg.Namespace,
			Labels: map[string]string{
				LabelManagedBy: managedBy, LabelSandbox: "true", LabelID: req.SandboxID,
				LabelTemplate: req.TemplateID, LabelState: state, LabelPoolKey: poolKey(req, image, b.runtimeClass(req.Runtime)),
				LabelInternet: boolLabel(internet(req)),
			},
			Annotations: map[string]string{AnnRuntime: req.Runtime},
		},
		Spec: b.podSpec(req, image),
	}
	if state == StateClaimed {
		if err := claimMeta(&pod.ObjectMeta, req, b.cfg.Identity); err != nil {
			return nil, err
		}
	}
	return pod, nil
}

// claimMeta writes what a claim (or a cold create) records on a sandbox Pod:
// state, team, internet access, deadline, metadata, replica, time and the
// mark that its agent gets the link credential (AnnLink).
func claimMeta(m *metav1.ObjectMeta, req backend.CreateRequest, identity string) error {
	meta, err := json.Marshal(req.Metadata)
	if err != nil {
		return fmt.Errorf("encode metadata: %w", err)
	}
	m.Labels[LabelState] = StateClaimed
	m.Labels[LabelTeam] = teamLabel(req.Team)
	m.Labels[LabelInternet] = boolLabel(internet(req))
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	if !req.Deadline.IsZero() {
		m.Annotations[AnnDeadline] = req.Deadline.UTC().Format(time.RFC3339Nano)
	}
	m.Annotations[AnnMetadata] = string(meta)
	m.Annotations[AnnReplica] = identity
	m.Annotations[AnnClaimedAt] = time.Now().UTC().Format(time.RFC3339Nano)
	m.Annotations[AnnLink] = "true"
	return nil
}

// internet reports whether a sandbox of req gets the shared internet
// NetworkPolicy: not with NoInternet, nor with an egress policy of its own.
func internet(req backend.CreateRequest) bool { return !req.NoInternet && req.Egress.IsZero() }

// podSpec is the Pod spec of a sandbox: the agent as PID 1 of the template
// image, no service account token, no service links, the sandbox's own DNS,
// the request's limits and a readiness probe on envd.
func (b *Backend) podSpec(req backend.CreateRequest, image string) corev1.PodSpec {
	no, yes := false, true
	grace := int64(1)
	tol := int64(b.cfg.NodeLostToleration / time.Second)
	spec := corev1.PodSpec{
		Hostname:                      req.SandboxID,
		RestartPolicy:                 corev1.RestartPolicyNever,
		AutomountServiceAccountToken:  &no,
		EnableServiceLinks:            &no,
		TerminationGracePeriodSeconds: &grace,
		DNSPolicy:                     corev1.DNSNone,
		DNSConfig:                     &corev1.PodDNSConfig{Nameservers: b.cfg.DNS},
		SecurityContext: &corev1.PodSecurityContext{
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tol},
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tol},
		},
		Containers: []corev1.Container{b.container(req, image, &yes)},
	}
	if rc := b.runtimeClass(req.Runtime); rc != "" {
		spec.RuntimeClassName = &rc
	}
	if b.cfg.UserNamespaces {
		spec.HostUsers = &no
	}
	return spec
}

// container is the sandbox container: sudo inside needs privilege escalation,
// which stays within the container's capabilities (and user namespace).
func (b *Backend) container(req backend.CreateRequest, image string, escalate *bool) corev1.Container {
	mib := func(n int) resource.Quantity { return *resource.NewQuantity(int64(n)<<20, resource.BinarySI) }
	limits := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(max(req.CPUCount, 1)), resource.DecimalSI),
		corev1.ResourceMemory: mib(req.MemoryMB),
	}
	requests := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(b.cfg.CPURequest),
		corev1.ResourceMemory: mib(min(b.cfg.MemoryRequestMB, req.MemoryMB)),
	}
	if req.DiskSizeMB > 0 {
		limits[corev1.ResourceEphemeralStorage] = mib(req.DiskSizeMB)
	}
	return corev1.Container{
		Name: containerName, Image: image, ImagePullPolicy: b.cfg.ImagePullPolicy,
		Command:    append([]string{agentPath, "agent"}, req.Boot.Args()...),
		Env:        []corev1.EnvVar{{Name: "PATH", Value: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, {Name: "HOME", Value: "/root"}, {Name: "LANG", Value: "C.UTF-8"}},
		WorkingDir: "/",
		Ports: []corev1.ContainerPort{
			{Name: "envd", ContainerPort: envdPort, Protocol: corev1.ProtocolTCP},
			{Name: "interpreter", ContainerPort: agentapi.InterpreterPort, Protocol: corev1.ProtocolTCP},
		},
		Resources: corev1.ResourceRequirements{Limits: limits, Requests: requests},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/health", Port: intstr.FromInt32(envdPort),
			}},
			PeriodSeconds: 1, TimeoutSeconds: 2, FailureThreshold: 3,
		},
		SecurityContext:          &corev1.SecurityContext{AllowPrivilegeEscalation: escalate},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// runtimeClass maps a runtime name to its RuntimeClass ("" = cluster default).
func (b *Backend) runtimeClass(runtime string) string {
	if rc, ok := b.cfg.RuntimeClasses[runtime]; ok {
		return rc
	}
	return b.cfg.RuntimeClasses[""]
}

// poolKey identifies interchangeable sandbox Pods: equal image, RuntimeClass,
// limits and agent boot options.
func poolKey(req backend.CreateRequest, image, runtimeClass string) string {
	return hashLabel(image, runtimeClass, req.Runtime, strconv.Itoa(req.CPUCount), strconv.Itoa(req.MemoryMB),
		strconv.Itoa(req.DiskSizeMB), req.Boot.Key())
}
