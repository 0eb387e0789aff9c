// Package tmpfs gives tests a small file system that really fills up. Only
// Linux mounts one; elsewhere Mount skips the test.
package tmpfs
