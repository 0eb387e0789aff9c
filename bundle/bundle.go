// Package bundle is how a set of models is published: a bundle's
// encoding (an envelope with its checksum and signature around the
// models' JSON), its files in a trainer's bundle directory, and its
// lineage (the epoch and versions by which a predictor tells a newer
// bundle from an older or a replayed one). What the models compute, and so
// what a bundle predicts, is package model's; this package never evaluates
// one, but for the consistency checks Decode makes every model pass
// (model.TargetModel.Prepare).
package bundle

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
)

// Format names the on-disk and on-wire bundle format. A reader refuses any
// other value.
const Format = "headroom-bundle/1"

// envelope is the serialised bundle. The checksum and signature cover the
// exact payload bytes, so verification never depends on re-encoding.
type envelope struct {
	Format  string          `json:"format"`
	Version uint64          `json:"version"`
	Epoch   string          `json:"epoch,omitempty"`
	SHA256  string          `json:"sha256"`
	HMAC    string          `json:"hmac,omitempty"`
	Payload json.RawMessage `json:"payload"`
}

// Encode serialises b, sets b.Checksum, and signs the payload with key when
// key is not empty. Bundles are data only: JSON numbers and strings, never
// code, unlike the reference's pickles.
func Encode(b *model.Bundle, key []byte) ([]byte, error) {
	payload, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode bundle %d: %w", b.Version, err)
	}
	sum := sha256.Sum256(payload)
	env := envelope{Format: Format, Version: b.Version, Epoch: b.Epoch, SHA256: hex.EncodeToString(sum[:]), Payload: payload}
	if len(key) > 0 {
		env.HMAC = sign(key, payload)
	}
	out, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode bundle %d: %w", b.Version, err)
	}
	b.Checksum = env.SHA256
	return out, nil
}

// ErrUnsigned and ErrBadSignature are returned by Decode when a key is
// required and the bundle is unsigned or signed with another key.
var (
	ErrUnsigned     = errors.New("bundle is not signed")
	ErrBadSignature = errors.New("bundle signature does not match the key")
	ErrChecksum     = errors.New("bundle checksum mismatch")
)

// Decode parses and verifies a serialised bundle: format, checksum, the
// signature when key is set, and every model's consistency (Prepare). A
// bundle that fails any check is refused whole.
func Decode(data []byte, key []byte) (*model.Bundle, error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("decode bundle: %w", err)
	}
	if env.Format != Format {
		return nil, fmt.Errorf("decode bundle: format %q, this binary reads %q", env.Format, Format)
	}
	sum := sha256.Sum256(env.Payload)
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return nil, fmt.Errorf("decode bundle %d: %w", env.Version, ErrChecksum)
	}
	if len(key) > 0 {
		if env.HMAC == "" {
			return nil, fmt.Errorf("decode bundle %d: %w", env.Version, ErrUnsigned)
		}
		if !hmac.Equal([]byte(env.HMAC), []byte(sign(key, env.Payload))) {
			return nil, fmt.Errorf("decode bundle %d: %w", env.Version, ErrBadSignature)
		}
	}
	// Unknown fields are ignored so a predictor can read a newer trainer's
	// bundle; what it cannot evaluate (an unknown column or kind) Prepare refuses.
	var b model.Bundle
	if err := json.Unmarshal(env.Payload, &b); err != nil {
		return nil, fmt.Errorf("decode bundle %d payload: %w", env.Version, err)
	}
	if b.Version != env.Version {
		return nil, fmt.Errorf("decode bundle: envelope says version %d, payload %d", env.Version, b.Version)
	}
	if b.Epoch != env.Epoch {
		return nil, fmt.Errorf("decode bundle %d: envelope says epoch %q, payload %q", b.Version, env.Epoch, b.Epoch)
	}
	if err := checkEpoch(b.Epoch); err != nil {
		return nil, fmt.Errorf("decode bundle %d: %w", b.Version, err)
	}
	for _, t := range features.PodTargets {
		if m := b.Target(t); m != nil {
			if err := m.Prepare(); err != nil {
				return nil, fmt.Errorf("decode bundle %d: %s model: %w", b.Version, t, err)
			}
		}
	}
	for _, t := range features.Targets {
		m := b.Law(t)
		if t.PerPod() || m == nil {
			continue
		}
		if err := m.Prepare(); err != nil {
			if t != features.KVTransfer { // whose errors name it already
				err = fmt.Errorf("%s model: %w", t, err)
			}
			return nil, fmt.Errorf("decode bundle %d: %w", b.Version, err)
		}
	}
	b.Checksum = env.SHA256
	return &b, nil
}

func sign(key, payload []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(payload)
	return hex.EncodeToString(mac.Sum(nil))
}
