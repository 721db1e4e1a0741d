package mysql

// LockedBuffer is lockedBuffer for the external tests (package mysql_test):
// a log destination safe to write from the store's goroutines.
type LockedBuffer = lockedBuffer
