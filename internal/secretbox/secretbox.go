// Package secretbox encrypts small values at rest with a server key:
// AES-256-GCM (NIST SP 800-38D) with a random 96-bit nonce per value and the
// caller's associated data (for example the record a value belongs to, so a
// sealed value cannot be moved to another record). The key is 32 random bytes
// in a file only root can read (mode 0600), created on first use.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// KeySize is the size of a key file in bytes (AES-256).
const KeySize = 32

// keyFileMode is the mode of the key file: root only.
const keyFileMode = 0o600

// version prefixes every sealed value so the format can change later.
const version byte = 1

// ErrOpen is returned (wrapped) by Open for a value that is not a sealed value
// of this key and associated data (tampered, truncated or from another key).
var ErrOpen = errors.New("secretbox: cannot open sealed value")

// Box seals and opens values with one key. It is safe for concurrent use.
type Box struct {
	aead cipher.AEAD
}

// LoadOrCreate returns a Box for the key in file path, creating the file with
// a new random key (mode 0600, exclusively, so two processes never write two
// keys) when it does not exist. An existing file is made 0600. Errors: an
// unreadable file, or one that is not KeySize bytes.
func LoadOrCreate(path string) (*Box, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = create(path)
	}
	if err != nil {
		return nil, fmt.Errorf("secret key %s: %w", path, err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("secret key %s: %d bytes, want %d", path, len(key), KeySize)
	}
	if err := os.Chmod(path, keyFileMode); err != nil {
		return nil, fmt.Errorf("restrict secret key %s: %w", path, err)
	}
	return New(key)
}

// create writes a fresh key to path; when another process created the file
// first, its key is read instead.
func create(path string) ([]byte, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, keyFileMode)
	if errors.Is(err, fs.ErrExist) {
		return os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(key); err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return key, f.Close()
}

// New returns a Box for a KeySize-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secretbox: key of %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plaintext bound to ad: version byte, nonce, ciphertext and tag.
func (b *Box) Seal(plaintext, ad []byte) []byte {
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic("secretbox: no randomness: " + err.Error()) // crypto/rand never fails on Linux
	}
	out := append([]byte{version}, nonce...)
	return b.aead.Seal(out, nonce, plaintext, ad)
}

// Open decrypts a value Seal made with the same key and ad. Errors wrap ErrOpen.
func (b *Box) Open(sealed, ad []byte) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(sealed) < 1+n+b.aead.Overhead() || sealed[0] != version {
		return nil, fmt.Errorf("%w: malformed", ErrOpen)
	}
	out, err := b.aead.Open(nil, sealed[1:1+n], sealed[1+n:], ad)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOpen, err)
	}
	return out, nil
}
