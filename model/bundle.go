package model

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/headroomhq/headroom/features"
)

// BundleFormat names the on-disk and on-wire bundle format. A reader refuses
// any other value.
const BundleFormat = "headroom-bundle/1"

// Bundle is one published, immutable set of models: both targets, trained
// together and served together, so a predictor never mixes generations.
// A nil target model means that target has no model yet.
type Bundle struct {
	Version uint64 `json:"version"`
	// Epoch names the lineage the version counts in: one trainer's bundle
	// directory (lineage.go). Versions compare only within an epoch; a
	// bundle of an older trainer has none.
	Epoch     string       `json:"epoch,omitempty"`
	CreatedAt time.Time    `json:"created_at"`
	TTFT      *TargetModel `json:"ttft,omitempty"`
	TPOT      *TargetModel `json:"tpot,omitempty"`
	// Transfer predicts KV-cache transfer time between a prefill and a
	// decode pod; nil until the trainer has seen disaggregated samples.
	Transfer *TransferModel `json:"kv_transfer,omitempty"`
	// XGBoostMissing records that the trainer ran without the xgboost binary,
	// so every model in this bundle is linear only.
	XGBoostMissing bool `json:"xgboost_missing,omitempty"`

	// Checksum is the hex SHA-256 of the encoded payload; set by Encode and
	// verified by Decode.
	Checksum string `json:"-"`
}

// SamplesSeen is the number of samples the bundle's TTFT and TPOT models
// were trained and held out on.
func (b *Bundle) SamplesSeen() int {
	n := 0
	for _, t := range features.PodTargets {
		if m := b.Target(t); m != nil {
			n += m.TrainSamples + m.HoldoutSamples
		}
	}
	return n
}

// Target returns the per-pod model of a target, or nil; KVTransfer's model
// is Transfer, of another kind.
func (b *Bundle) Target(t features.Target) *TargetModel {
	if b == nil {
		return nil
	}
	switch t {
	case features.TTFT:
		return b.TTFT
	case features.TPOT:
		return b.TPOT
	}
	return nil
}

// Has reports whether b holds a model of target t, of whatever kind.
func (b *Bundle) Has(t features.Target) bool {
	if t == features.KVTransfer {
		return b != nil && b.Transfer != nil
	}
	return b.Target(t) != nil
}

// SetTarget makes m the per-pod model of t (TTFT or TPOT).
func (b *Bundle) SetTarget(t features.Target, m *TargetModel) {
	switch t {
	case features.TTFT:
		b.TTFT = m
	case features.TPOT:
		b.TPOT = m
	default:
		panic(fmt.Sprintf("model: %s has no per-pod model", t))
	}
}

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
func (b *Bundle) Encode(key []byte) ([]byte, error) {
	payload, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode bundle %d: %w", b.Version, err)
	}
	sum := sha256.Sum256(payload)
	env := envelope{Format: BundleFormat, Version: b.Version, Epoch: b.Epoch, SHA256: hex.EncodeToString(sum[:]), Payload: payload}
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
func Decode(data []byte, key []byte) (*Bundle, error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("decode bundle: %w", err)
	}
	if env.Format != BundleFormat {
		return nil, fmt.Errorf("decode bundle: format %q, this binary reads %q", env.Format, BundleFormat)
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
	var b Bundle
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
	if b.Transfer != nil {
		if err := b.Transfer.Prepare(); err != nil {
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
