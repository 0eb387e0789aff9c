package wire

import (
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/jsonscan"
)

// TimestampLayout is how responses write times: RFC 3339 in UTC with a Z,
// microsecond precision.
const TimestampLayout = "2006-01-02T15:04:05.999999Z07:00"

// Timestamp formats t with TimestampLayout.
func Timestamp(t time.Time) string {
	return t.UTC().Format(TimestampLayout)
}

// AppendTimestamp is Timestamp appending to dst, without allocating.
func AppendTimestamp(dst []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(dst, TimestampLayout)
}

// parseTimestamp reads an RFC 3339 date-time: YYYY-MM-DDTHH:MM:SS, an
// optional fraction of 1 to 9 digits, and Z or a ±HH:MM offset. 't', 'z' and
// a space separator are accepted as RFC 3339 allows; a value without a zone
// is taken as UTC (pydantic accepts such naive values). The result is in
// UTC. On failure it returns a pydantic-style reason.
//
// Hand-written rather than time.Parse so that the accepted forms are exactly
// these (time.Parse takes more than 9 fractional digits and no naive form)
// and the reasons name the faulty part.
func parseTimestamp(b []byte) (time.Time, string) {
	if len(b) < len("2006-01-02T15:04:05") {
		return time.Time{}, "input is too short"
	}
	year, ok := digits(b[0:4])
	if !ok {
		return time.Time{}, "invalid character in year"
	}
	if b[4] != '-' || b[7] != '-' {
		return time.Time{}, "invalid date separator, expected `-`"
	}
	month, ok := digits(b[5:7])
	if !ok {
		return time.Time{}, "invalid character in month"
	}
	day, ok := digits(b[8:10])
	if !ok {
		return time.Time{}, "invalid character in day"
	}
	if year < 1 {
		return time.Time{}, "year value is outside expected range of 1-9999"
	}
	if month < 1 || month > 12 {
		return time.Time{}, "month value is outside expected range of 1-12"
	}
	if day < 1 || day > daysIn(year, month) {
		return time.Time{}, "day value is outside expected range"
	}
	if c := b[10]; c != 'T' && c != 't' && c != ' ' {
		return time.Time{}, "invalid datetime separator, expected `T`, `t` or space"
	}
	if b[13] != ':' || b[16] != ':' {
		return time.Time{}, "invalid time separator, expected `:`"
	}
	hour, ok1 := digits(b[11:13])
	minute, ok2 := digits(b[14:16])
	second, ok3 := digits(b[17:19])
	if !ok1 || !ok2 || !ok3 {
		return time.Time{}, "invalid character in time"
	}
	if hour > 23 {
		return time.Time{}, "hour value is outside expected range of 0-23"
	}
	if minute > 59 {
		return time.Time{}, "minute value is outside expected range of 0-59"
	}
	if second > 59 {
		return time.Time{}, "second value is outside expected range of 0-59"
	}
	rest := b[19:]
	nanos := 0
	if len(rest) > 0 && rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		frac := rest[1:n]
		if len(frac) == 0 {
			return time.Time{}, "second fraction is missing digits"
		}
		if len(frac) > 9 {
			return time.Time{}, "second fraction has more than 9 digits"
		}
		nanos, _ = digits(frac)
		for i := len(frac); i < 9; i++ {
			nanos *= 10
		}
		rest = rest[n:]
	}
	offset := 0 // seconds east of UTC
	switch {
	case len(rest) == 0:
		// naive: UTC
	case len(rest) == 1 && (rest[0] == 'Z' || rest[0] == 'z'):
	case rest[0] == '+' || rest[0] == '-':
		if len(rest) != 6 || rest[3] != ':' {
			return time.Time{}, "invalid timezone, expected `Z` or `±HH:MM`"
		}
		oh, ok1 := digits(rest[1:3])
		om, ok2 := digits(rest[4:6])
		if !ok1 || !ok2 {
			return time.Time{}, "invalid character in timezone"
		}
		if oh > 23 || om > 59 {
			return time.Time{}, "timezone offset must be less than 24 hours"
		}
		offset = oh*3600 + om*60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, "unexpected extra characters at the end of the input"
	}
	t := time.Date(year, time.Month(month), day, hour, minute, second, nanos, time.UTC)
	t = t.Add(-time.Duration(offset) * time.Second)
	if t.Before(features.MinTimestamp) || t.After(features.MaxTimestamp) {
		return time.Time{}, "datetime outside the range samples are stored in, " +
			features.MinTimestamp.Format(time.RFC3339) + " to " + features.MaxTimestamp.Format(time.RFC3339)
	}
	return t, ""
}

// digits parses a short run of ASCII digits.
func digits(b []byte) (int, bool) {
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// timestampValue converts a training entry's timestamp: an RFC 3339 string.
// The reason for a datetime_parsing error is recomputed when it is reported.
func timestampValue(t *jsonscan.Token) (time.Time, problemCode) {
	if t.Kind != jsonscan.String {
		return time.Time{}, probDatetimeType
	}
	ts, reason := parseTimestamp(t.Text)
	if reason != "" {
		return time.Time{}, probDatetimeParsing
	}
	return ts, noProblem
}
