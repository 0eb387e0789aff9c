// Package procgroup runs a child program as a process group of its own, so
// that whatever it starts is niced and killed with it. Process groups are
// Unix's; on other systems the child alone is niced (not at all on Windows)
// and killed.
package procgroup
