package jupyter

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ProtocolVersion is the Jupyter messaging protocol version the client speaks.
const ProtocolVersion = "5.3"

// delimiter separates routing identities from the signed part of a message
// (Jupyter messaging, "The Wire Protocol").
var delimiter = []byte("<IDS|MSG>")

// ErrBadSignature is returned when a received message's HMAC does not match.
var ErrBadSignature = errors.New("jupyter: invalid message signature")

// Header is a Jupyter message header (messaging v5.3 "Message Header").
// Date is kept as the kernel sent it (ISO 8601 string).
type Header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// Message is one decoded Jupyter message. ParentHeader is the zero Header when the
// message has no parent. Content and Metadata stay raw JSON; Channel names the
// socket it arrived on ("shell", "iopub", "control", "stdin").
type Message struct {
	Channel      string
	Header       Header
	ParentHeader Header
	Metadata     json.RawMessage
	Content      json.RawMessage
	Buffers      [][]byte
}

// Type returns the message type (header.msg_type), e.g. "stream" or "execute_reply".
func (m *Message) Type() string { return m.Header.MsgType }

// Decode unmarshals the message content into v.
func (m *Message) Decode(v any) error {
	if err := json.Unmarshal(m.Content, v); err != nil {
		return fmt.Errorf("decode %s content: %w", m.Header.MsgType, err)
	}
	return nil
}

// signer signs and verifies messages with HMAC-SHA256 over the four JSON frames
// (header, parent_header, metadata, content). An empty key disables signing.
type signer struct{ key []byte }

func (s signer) sign(parts [][]byte) []byte {
	if len(s.key) == 0 {
		return nil
	}
	mac := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		mac.Write(p)
	}
	sum := mac.Sum(nil)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

func (s signer) verify(sig []byte, parts [][]byte) bool {
	if len(s.key) == 0 {
		return true
	}
	return hmac.Equal(bytes.ToLower(sig), s.sign(parts))
}

// newID returns a random 32-hex-digit identifier for msg_id and session values.
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// isoNow formats the current time as Jupyter header dates (ISO 8601, UTC, µs).
func isoNow() string {
	return time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}

// encode builds the wire frames for a message sent from a DEALER socket:
// delimiter, signature, header, parent_header, metadata, content.
func (s signer) encode(h Header, parent *Header, content any) ([][]byte, error) {
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode header: %w", err)
	}
	pb := []byte("{}")
	if parent != nil {
		if pb, err = json.Marshal(parent); err != nil {
			return nil, fmt.Errorf("encode parent header: %w", err)
		}
	}
	cb, err := json.Marshal(content)
	if err != nil {
		return nil, fmt.Errorf("encode %s content: %w", h.MsgType, err)
	}
	parts := [][]byte{hb, pb, []byte("{}"), cb}
	return append([][]byte{delimiter, s.sign(parts)}, parts...), nil
}

// decode parses received frames (any routing prefix or SUB topic before the
// delimiter is skipped), verifies the signature and unmarshals the headers.
func (s signer) decode(channel string, frames [][]byte) (*Message, error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], delimiter) {
		i++
	}
	if len(frames)-i < 6 {
		return nil, fmt.Errorf("jupyter: malformed %s message: %d frames", channel, len(frames))
	}
	sig, parts := frames[i+1], frames[i+2:i+6]
	if !s.verify(sig, parts) {
		return nil, ErrBadSignature
	}
	m := &Message{Channel: channel, Metadata: parts[2], Content: parts[3], Buffers: frames[i+6:]}
	if err := json.Unmarshal(parts[0], &m.Header); err != nil {
		return nil, fmt.Errorf("jupyter: decode %s header: %w", channel, err)
	}
	if len(bytes.TrimSpace(parts[1])) > 0 {
		if err := json.Unmarshal(parts[1], &m.ParentHeader); err != nil {
			return nil, fmt.Errorf("jupyter: decode %s parent header: %w", channel, err)
		}
	}
	return m, nil
}
