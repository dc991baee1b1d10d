package jupyter

import (
	"context"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/go-zeromq/zmq4"
)

// SocketKind names the ZeroMQ socket type a kernel channel uses on the client side
// (Jupyter messaging v5.3, "Channels"): DEALER for shell, control and stdin, SUB
// for iopub.
type SocketKind int

// Socket kinds used by the client.
const (
	Dealer SocketKind = iota + 1
	Sub
)

// Socket is the small part of a ZeroMQ socket the client needs: multipart send and
// receive of whole messages (frames as byte slices). Send and Recv may be called
// from different goroutines; Close makes a blocked Recv return an error.
type Socket interface {
	Send(frames [][]byte) error
	Recv() ([][]byte, error)
	Close() error
}

// Dialer connects a client socket of the given kind to endpoint ("ipc:///path" or
// "tcp://host:port"). identity is the ZeroMQ routing identity (nil = random); a SUB
// socket subscribes to every topic. Dial keeps retrying while the peer has not bound
// the endpoint yet and returns ctx's error when ctx ends first.
type Dialer func(ctx context.Context, kind SocketKind, endpoint string, identity []byte) (Socket, error)

// zmqSocket adapts a go-zeromq/zmq4 socket to Socket.
type zmqSocket struct{ s zmq4.Socket }

func (z zmqSocket) Send(frames [][]byte) error { return z.s.SendMulti(zmq4.NewMsgFrom(frames...)) }

func (z zmqSocket) Recv() ([][]byte, error) {
	m, err := z.s.Recv()
	if err != nil {
		return nil, err
	}
	return m.Frames, nil
}

func (z zmqSocket) Close() error { return z.s.Close() }

// ZMQDialer is the default Dialer, backed by the pure-Go github.com/go-zeromq/zmq4
// (ZMTP 3.0, NULL security). It retries the connect every 5 ms until ctx ends.
func ZMQDialer(ctx context.Context, kind SocketKind, endpoint string, identity []byte) (Socket, error) {
	sctx, cancel := context.WithCancel(context.Background())
	opts := []zmq4.Option{
		zmq4.WithDialerRetry(5 * time.Millisecond),
		zmq4.WithDialerMaxRetries(-1),
		zmq4.WithLogger(log.New(io.Discard, "", 0)),
	}
	if len(identity) > 0 {
		opts = append(opts, zmq4.WithID(zmq4.SocketIdentity(identity)))
	}
	var s zmq4.Socket
	switch kind {
	case Dealer:
		s = zmq4.NewDealer(sctx, opts...)
	case Sub:
		s = zmq4.NewSub(sctx, opts...)
		if err := s.SetOption(zmq4.OptionSubscribe, ""); err != nil {
			cancel()
			return nil, fmt.Errorf("subscribe %s: %w", endpoint, err)
		}
	default:
		cancel()
		return nil, fmt.Errorf("dial %s: unknown socket kind %d", endpoint, kind)
	}
	done := make(chan error, 1)
	go func() { done <- s.Dial(endpoint) }()
	select {
	case err := <-done:
		if err != nil {
			s.Close()
			cancel()
			return nil, fmt.Errorf("dial %s: %w", endpoint, err)
		}
		return zmqSocket{&cancelSocket{Socket: s, cancel: cancel}}, nil
	case <-ctx.Done():
		s.Close()
		cancel()
		// A peer that accepted the connection but never speaks ZMTP keeps Dial
		// reading its greeting until the peer goes away (the kernel is then
		// killed by the caller): do not wait for it.
		go func() { <-done }()
		return nil, fmt.Errorf("dial %s: %w", endpoint, ctx.Err())
	}
}

// cancelSocket releases the socket's private context on Close.
type cancelSocket struct {
	zmq4.Socket
	cancel context.CancelFunc
}

func (c *cancelSocket) Close() error {
	err := c.Socket.Close()
	c.cancel()
	return err
}
