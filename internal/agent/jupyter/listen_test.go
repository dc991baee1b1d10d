package jupyter

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"
)

func TestWaitListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := waitListening(ctx, []int{port}, time.Millisecond, nil); err != nil {
		t.Fatalf("listening port: %v", err)
	}

	// A port nobody listens on: the wait ends with ctx, or early when the
	// process dies.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := free.Addr().(*net.TCPAddr).Port
	free.Close()
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if err := waitListening(short, []int{port, closed}, time.Millisecond, nil); err == nil {
		t.Fatal("waitListening returned for a port nobody listens on")
	}
	dead := make(chan struct{})
	close(dead)
	if err := waitListening(context.Background(), []int{closed}, time.Millisecond, dead); err != nil {
		t.Fatalf("dead process: %v", err)
	}

	// Listening starts while waiting.
	go func() {
		time.Sleep(30 * time.Millisecond)
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(closed))); err == nil {
			defer l.Close()
			time.Sleep(2 * time.Second)
		}
	}()
	if err := waitListening(ctx, []int{closed}, time.Millisecond, nil); err != nil {
		t.Fatalf("port that starts listening: %v", err)
	}
}
