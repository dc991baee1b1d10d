package process

import (
	"bytes"
	"testing"

	pb "github.com/cubby-dev/cubby/internal/envdpb/process"
)

func TestHubDropsSlowSubscriberOnly(t *testing.T) {
	h := newHub(100)
	slow, fast := h.subscribe(), h.subscribe()
	var got []byte
	for i := range 5 {
		chunk := bytes.Repeat([]byte{byte('a' + i)}, 40)
		h.publish(dataEvent(kindStdout, chunk), len(chunk))
		evs, dropped := fast.take() // the fast one keeps up
		if dropped {
			t.Fatalf("fast subscriber dropped at chunk %d", i)
		}
		for _, ev := range evs {
			got = append(got, ev.GetData().GetStdout()...)
		}
	}
	h.finish(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{Exited: true}}})

	if len(got) != 200 {
		t.Fatalf("fast subscriber got %d bytes, want 200", len(got))
	}
	evs, _ := fast.take()
	if len(evs) != 1 || evs[0].GetEnd() == nil {
		t.Fatalf("fast subscriber: want exactly the end event, got %v", evs)
	}

	evs, dropped := slow.take()
	if !dropped {
		t.Fatal("slow subscriber was not dropped after exceeding its backlog")
	}
	if len(evs) != 2 { // 2×40 bytes fit in 100, the third chunk overflowed
		t.Fatalf("slow subscriber kept %d events, want 2", len(evs))
	}
	for _, ev := range evs {
		if ev.GetEnd() != nil {
			t.Fatal("a dropped subscriber must not receive the end event")
		}
	}

	late := h.subscribe()
	evs, dropped = late.take()
	if dropped || len(evs) != 1 || evs[0].GetEnd() == nil {
		t.Fatalf("late subscriber: want only the remembered end event, got %v dropped=%v", evs, dropped)
	}
}
