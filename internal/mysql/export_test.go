package mysql

// LockedBuffer is lockedBuffer for the external tests (package mysql_test):
// a log destination safe to write from the store's goroutines.
type LockedBuffer = lockedBuffer

// SetCountChunk sets CountClocks' statement size and budget for a test.
func SetCountChunk(t interface{ Cleanup(func()) }, chunk, budget int) {
	c, b := countChunk, countBudget
	countChunk, countBudget = chunk, budget
	t.Cleanup(func() { countChunk, countBudget = c, b })
}
