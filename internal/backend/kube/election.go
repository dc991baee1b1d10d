package kube

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
)

// LeaseName is the coordination.k8s.io Lease the replicas elect their leader on.
const LeaseName = "cubby-leader"

// Election tunes leader election; zero fields take client-go's customary
// values (15 s lease, 10 s renew deadline, 2 s retry).
type Election struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

func (e *Election) defaults() {
	if e.LeaseDuration <= 0 {
		e.LeaseDuration = 15 * time.Second
	}
	if e.RenewDeadline <= 0 {
		e.RenewDeadline = 10 * time.Second
	}
	if e.RetryPeriod <= 0 {
		e.RetryPeriod = 2 * time.Second
	}
}

// Elect campaigns for the Lease LeaseName as b's Identity until ctx ends:
// while this replica holds it, lead runs with a context cancelled when the
// lease is lost; then it campaigns again. The Lease is released when ctx ends
// so another replica takes over at once. Leadership changes are recorded as
// Events on the Lease.
func (b *Backend) Elect(ctx context.Context, e Election, lead func(context.Context)) {
	e.defaults()
	events := record.NewBroadcaster()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: b.client.CoreV1().Events(b.cfg.Namespace)})
	defer events.Shutdown()
	lock := &resourcelock.LeaseLock{
		LeaseMeta: metav1.ObjectMeta{Name: LeaseName, Namespace: b.cfg.Namespace},
		Client:    b.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: b.cfg.Identity,
			EventRecorder: events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "cubby", Host: b.cfg.Identity})},
	}
	var serial sync.Mutex // a lead still returning never overlaps the next one
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: e.LeaseDuration, RenewDeadline: e.RenewDeadline, RetryPeriod: e.RetryPeriod,
			ReleaseOnCancel: true, Name: LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					serial.Lock()
					defer serial.Unlock()
					if lctx.Err() == nil {
						lead(lctx)
					}
				},
				OnStoppedLeading: func() { b.log.Info("leadership lost or released", "identity", b.cfg.Identity) },
			},
		})
	}
	serial.Lock() // wait for the last lead to return
	serial.Unlock()
}
