package wire

import (
	"testing"
	"time"
)

func TestDecodeBundleWait(t *testing.T) {
	for _, tt := range []struct {
		raw     string
		want    time.Duration
		errType string // the one error's type; "" for none
	}{
		{"", 0, ""},
		{"30s", 30 * time.Second, ""},
		{"250ms", 250 * time.Millisecond, ""},
		{"30", 30 * time.Second, ""},
		{"0.5", 500 * time.Millisecond, ""},
		{"0", 0, ""},
		{"10m", MaxBundleWait, ""},
		{"1e300", MaxBundleWait, ""},
		{"-1s", 0, "greater_than_equal"},
		{"-3", 0, "greater_than_equal"},
		{"soon", 0, "duration_parsing"},
		{"NaN", 0, "duration_parsing"},
		{"Inf", 0, "duration_parsing"},
	} {
		got, errs := DecodeBundleWait(tt.raw)
		gotType := ""
		if len(errs) > 0 {
			gotType = errs[0].Type
			if len(errs) != 1 || errs[0].Input != tt.raw || len(errs[0].Loc) != 2 || errs[0].Loc[0] != "query" || errs[0].Loc[1] != "wait" {
				t.Errorf("DecodeBundleWait(%q) errors %+v", tt.raw, errs)
			}
		}
		if got != tt.want || gotType != tt.errType {
			t.Errorf("DecodeBundleWait(%q) = %v, %q; want %v, %q", tt.raw, got, gotType, tt.want, tt.errType)
		}
	}
}
