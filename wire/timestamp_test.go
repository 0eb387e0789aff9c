package wire

import (
	"strings"
	"testing"
	"time"
)

func TestParseTimestamp(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v.UTC()
	}
	tests := []struct {
		in     string
		want   time.Time
		reason string // substring of the failure reason; "" for success
	}{
		{"2026-11-29T15:42:36.709963272Z", utc("2026-11-29T15:42:36.709963272Z"), ""},
		{"2026-11-29T15:42:36Z", utc("2026-11-29T15:42:36Z"), ""},
		{"2026-11-29T15:42:36.5Z", utc("2026-11-29T15:42:36.5Z"), ""},
		{"2026-11-29t15:42:36z", utc("2026-11-29T15:42:36Z"), ""},
		{"2026-11-29 15:42:36Z", utc("2026-11-29T15:42:36Z"), ""},
		{"2026-11-29T15:42:36.123+01:00", utc("2026-11-29T14:42:36.123Z"), ""},
		{"2026-11-29T15:42:36-05:30", utc("2026-11-29T21:12:36Z"), ""},
		{"2026-11-29T23:42:36-05:00", utc("2026-11-30T04:42:36Z"), ""},
		{"2026-11-29T15:42:36.709963", utc("2026-11-29T15:42:36.709963Z"), ""}, // naive: UTC
		{"2024-02-29T00:00:00Z", utc("2024-02-29T00:00:00Z"), ""},
		{"2026-11-29T15:42:36.7099632721Z", time.Time{}, "more than 9 digits"},
		{"2026-11-29T15:42:36.Z", time.Time{}, "fraction"},
		{"2026-02-29T00:00:00Z", time.Time{}, "day value"},
		{"2026-13-01T00:00:00Z", time.Time{}, "month value"},
		{"2026-00-01T00:00:00Z", time.Time{}, "month value"},
		{"2026-11-31T00:00:00Z", time.Time{}, "day value"},
		{"2026-11-29T24:00:00Z", time.Time{}, "hour value"},
		{"2026-11-29T15:60:00Z", time.Time{}, "minute value"},
		{"2026-11-29T15:42:60Z", time.Time{}, "second value"},
		{"2026-11-29T15:42:36+24:00", time.Time{}, "less than 24 hours"},
		{"2026-11-29T15:42:36+0100", time.Time{}, "timezone"},
		{"2026-11-29T15:42:36 UTC", time.Time{}, "extra characters"},
		{"2026-11-29", time.Time{}, "too short"},
		{"0000-01-01T00:00:00Z", time.Time{}, "year"},
		{"2026/11/29T15:42:36Z", time.Time{}, "date separator"},
		{"2026-11-29X15:42:36Z", time.Time{}, "separator"},
		{"2026-11-29T15-42-36Z", time.Time{}, "time separator"},
		{"2O26-11-29T15:42:36Z", time.Time{}, "year"},
		{"1764430956", time.Time{}, "too short"},
		{"", time.Time{}, "too short"},
	}
	for _, tt := range tests {
		got, reason := parseTimestamp([]byte(tt.in))
		if tt.reason == "" {
			if reason != "" || !got.Equal(tt.want) || got.Location() != time.UTC {
				t.Errorf("parseTimestamp(%q) = %v, %q; want %v in UTC", tt.in, got, reason, tt.want)
			}
			continue
		}
		if !strings.Contains(reason, tt.reason) {
			t.Errorf("parseTimestamp(%q) reason = %q, want it to mention %q", tt.in, reason, tt.reason)
		}
	}
}

func TestTimestampValue(t *testing.T) {
	for lit, want := range map[string]problemCode{
		`1764430956`:  probDatetimeType,
		`true`:        probDatetimeType,
		`"yesterday"`: probDatetimeParsing,
	} {
		tok := tokenOf(t, lit)
		if _, code := timestampValue(&tok); code != want {
			t.Errorf("timestampValue(%s) = problem %d, want %d", lit, code, want)
		}
	}
	tok := tokenOf(t, `"2026-11-29T15:42:36.709963272\u005a"`)
	got, code := timestampValue(&tok)
	if code != noProblem || got.Nanosecond() != 709963272 {
		t.Errorf("an escaped valid string: %v, problem %d", got, code)
	}
}
