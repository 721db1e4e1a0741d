package mysql

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/alarm"
)

// MySQL error numbers clockd tells apart.
const (
	errDeadlock     = 1213 // ER_LOCK_DEADLOCK: chosen as deadlock victim, rolled back
	errLockWait     = 1205 // ER_LOCK_WAIT_TIMEOUT: the statement was rolled back
	errDuplicateKey = 1062 // ER_DUP_ENTRY
	errNoSuchTable  = 1146 // ER_NO_SUCH_TABLE
)

// lockRetries bounds how often a deadlock or lock-wait victim runs again.
const lockRetries = 6

func isLockConflict(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == errDeadlock || me.Number == errLockWait)
}

func isDuplicate(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errDuplicateKey
}

func isNoSuchTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errNoSuchTable
}

// isServerError: MySQL answered with an error, so the statement (or the
// COMMIT) is known to have failed. Any other error of a write (connection
// cut, timeout) leaves its outcome unknown.
func isServerError(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me)
}

// connectionLost: the statement failed because the connection did, not
// because MySQL refused it (nor because the caller's context ended).
func connectionLost(err error) bool {
	return err != nil && !isServerError(err) && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, context.DeadlineExceeded) && errors.Is(mapErr(err), alarm.ErrUnavailable) &&
		!errors.Is(err, alarm.ErrNotFound)
}

// retryLocked runs f, again when InnoDB chose it as a deadlock victim or its
// lock wait timed out: the statement or transaction was rolled back and
// nothing of it applied, so running it again is safe. It is the one place
// that retries lock conflicts; every write goes through it.
func retryLocked(ctx context.Context, f func() error) error {
	var err error
	for attempt := 1; ; attempt++ {
		if err = f(); err == nil || !isLockConflict(err) || attempt == lockRetries {
			return err
		}
		// 1, 2, 4, 8, 16 ms, half of it random: the other transaction
		// usually commits within a round trip.
		d := time.Millisecond << (attempt - 1)
		d = d/2 + rand.N(d/2+1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// execRetry runs one statement through retryLocked.
func (s *Store) execRetry(ctx context.Context, q string, args ...any) error {
	return retryLocked(ctx, func() error {
		_, err := s.db.ExecContext(ctx, q, args...)
		return err
	})
}
