// Package prioritytest reads, for tests, the scheduling state Linux shows of
// a process or thread in /proc: what package priority and the xgboost
// runner set.
package prioritytest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Niceness reads the scheduling niceness of a process or thread from its
// /proc stat file (e.g. "/proc/self/task/TID/stat").
func Niceness(statPath string) (int, error) {
	v, err := StatField(statPath, 19)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s: niceness: %w", statPath, err)
	}
	return n, nil
}

// StatField returns field n (counting from 1, as proc(5) does) of a /proc
// stat file. Fields are counted after the command name (field 2), which may
// hold spaces and parentheses.
func StatField(statPath string, n int) (string, error) {
	stat, err := os.ReadFile(statPath)
	if err != nil {
		return "", err
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || n < 3 {
		return "", fmt.Errorf("%s: no field %d in %q", statPath, n, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < n-2 {
		return "", fmt.Errorf("%s: %d fields, want %d or more", statPath, len(f)+2, n)
	}
	return f[n-3], nil
}
