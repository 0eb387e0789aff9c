package model

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/headroomhq/headroom/features"
)

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
	// SplitTTFT predicts the whole TTFT of a disaggregated request per
	// link class, of the same law as Transfer (features.SplitTTFT) with
	// the prefill in its Shared terms; nil until the trainer has seen
	// split requests with both placements. Its key is split_ttft_v2: a
	// predictor before the shared terms ignores it (and ranks no pairs
	// without a transfer model, as before any split-TTFT law) rather than
	// read class laws without the prefill as whole TTFTs. A bundle of a
	// trainer before them has its law under split_ttft, which
	// UnmarshalJSON still reads (classes holding the prefill, no Shared).
	SplitTTFT *TransferModel `json:"split_ttft_v2,omitempty"`
	// XGBoostMissing records that the trainer ran without the xgboost binary,
	// so every model in this bundle is linear only.
	XGBoostMissing bool `json:"xgboost_missing,omitempty"`

	// Checksum is the hex SHA-256 of the encoded payload; set by
	// bundle.Encode and verified by bundle.Decode.
	Checksum string `json:"-"`
}

// UnmarshalJSON decodes a bundle, a split-TTFT law of the first form
// (key split_ttft, of trainers before the shared terms) as SplitTTFT
// when the bundle has none of the present form.
func (b *Bundle) UnmarshalJSON(data []byte) error {
	type plain Bundle // without this method
	v := struct {
		*plain
		LegacySplitTTFT *TransferModel `json:"split_ttft"`
	}{plain: (*plain)(b)}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	if b.SplitTTFT == nil {
		b.SplitTTFT = v.LegacySplitTTFT
	}
	return nil
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
	if !t.PerPod() {
		return b.Law(t) != nil
	}
	return b.Target(t) != nil
}

// Law returns the per-pair model of a target (KVTransfer's Transfer,
// SplitTTFT's SplitTTFT), or nil.
func (b *Bundle) Law(t features.Target) *TransferModel {
	if b == nil {
		return nil
	}
	switch t {
	case features.KVTransfer:
		return b.Transfer
	case features.SplitTTFT:
		return b.SplitTTFT
	}
	return nil
}

// SetLaw makes m the per-pair model of t (KVTransfer or SplitTTFT).
func (b *Bundle) SetLaw(t features.Target, m *TransferModel) {
	switch t {
	case features.KVTransfer:
		b.Transfer = m
	case features.SplitTTFT:
		b.SplitTTFT = m
	default:
		panic(fmt.Sprintf("model: %s has no per-pair model", t))
	}
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
