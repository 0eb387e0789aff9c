package model

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

func TestNewInfo(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 1, 1, 0, time.UTC)

	// Before the first model: nothing ready, times null, counts still live.
	none := NewInfo(nil, time.Time{}, now, func(tg features.Target) (int, int) { return 10 + int(tg), 1 })
	if none.Version != 0 || none.TrainedAt != nil || none.AgeSeconds != nil || none.TTFT.Ready || none.TPOT.Ready {
		t.Errorf("no model: %+v", none)
	}
	if none.TTFT.TrainSamples != 10 || none.TPOT.TrainSamples != 11 || none.TPOT.HoldoutSamples != 1 {
		t.Errorf("no model: store counts %+v %+v, want the live ones", none.TTFT, none.TPOT)
	}

	b := testBundle(t)
	loaded := now.Add(-time.Second)
	info := NewInfo(&Published{Bundle: b}, loaded, now, nil)
	if info.Version != 7 || info.TrainedAt != "2026-11-29T12:00:01Z" || *info.AgeSeconds != 60 ||
		info.LoadedAt != "2026-11-29T12:01:00Z" {
		t.Errorf("info %+v, want version 7 trained a minute ago", info)
	}
	for name, ti := range map[string]TargetInfo{"ttft": info.TTFT, "tpot": info.TPOT} {
		m := b.Target(features.TTFT)
		if name == "tpot" {
			m = b.Target(features.TPOT)
		}
		// Without a store, the counts are the ones the model was trained on.
		if !ti.Ready || ti.Kind != string(m.Kind) || ti.TrainSamples != 500 || ti.HoldoutSamples != 50 ||
			len(ti.FeatureRanges) != len(m.Columns) || len(ti.LinearCoefficients) != len(m.Columns) {
			t.Errorf("%s: %+v", name, ti)
		}
	}
	if info.TTFT.Trees == 0 || info.TPOT.Trees != 0 {
		t.Errorf("trees: ttft %d, tpot %d; want some and none", info.TTFT.Trees, info.TPOT.Trees)
	}
	if _, err := json.Marshal(info); err != nil {
		t.Errorf("info does not encode: %v", err)
	}
	if info.TTFT.CalibrationAdjustment != nil {
		t.Errorf("adjustment %+v on a model without one", info.TTFT.CalibrationAdjustment)
	}
	adj := &LevelAdjustment{Quantile: 0.9, Level: 0.94, Samples: 321}
	b.TPOT.Calibration.Adjustment = adj
	info = NewInfo(&Published{Bundle: b}, loaded, now, nil)
	if got := info.TPOT.CalibrationAdjustment; got == nil || *got != *adj {
		t.Errorf("info shows adjustment %+v, want the model's %+v", got, adj)
	}
	if got := info.TPOT.CalibrationOutOfRangeAdjustment; got != nil {
		t.Errorf("out-of-range adjustment %+v on a model without one", got)
	}
	out := &LevelAdjustment{Quantile: 0.9, Level: 0.985, Samples: 17}
	b.TPOT.Calibration.OutOfRange = out
	info = NewInfo(&Published{Bundle: b}, loaded, now, nil)
	if got := info.TPOT.CalibrationOutOfRangeAdjustment; got == nil || *got != *out || *info.TPOT.CalibrationAdjustment != *adj {
		t.Errorf("info shows out-of-range adjustment %+v beside %+v, want the model's %+v beside %+v", got, info.TPOT.CalibrationAdjustment, out, adj)
	}
	if enc, _ := json.Marshal(info.TPOT); !strings.Contains(string(enc), `"calibration_out_of_range_adjustment":{"quantile":0.9,"level":0.985,"samples":17}`) {
		t.Errorf("/model/info encodes %s", enc)
	}
}

func TestNewInfoTransfer(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 1, 1, 0, time.UTC)
	counts := func(tg features.Target) (int, int) { return 10 + int(tg), 1 }
	if none := NewInfo(nil, time.Time{}, now, counts); none.KVTransfer.Ready || none.KVTransfer.TrainSamples != 12 {
		t.Errorf("no model: %+v, want not ready with the store's 12 transfer samples", none.KVTransfer)
	}
	b := testBundle(t)
	b.Transfer = testTransferModel(t)
	b.Transfer.TrainSamples, b.Transfer.Holdout = 480, Quality{Rows: 52, MAPE: 4.5}
	ti := NewInfo(&Published{Bundle: b}, time.Time{}, now, nil).KVTransfer
	if !ti.Ready || ti.TrainedOnSamples != 480 || ti.Holdout.MAPE != 4.5 || len(ti.Classes) != 2 ||
		ti.Classes[1].Class != "cross-zone" || ti.Classes[1].BytesPerSec != 3e9 || ti.DefaultBytesPerToken != 160<<10 {
		t.Errorf("transfer info %+v", ti)
	}
	if _, err := json.Marshal(ti); err != nil {
		t.Error(err)
	}
}
