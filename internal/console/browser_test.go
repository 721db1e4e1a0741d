package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The browser tests drive Debian's chromium, started once for this package
// (the only package with browser tests). A missing chromium fails them: it
// is installed by .ci/run (apt-get install chromium), never skipped.

var (
	browserOnce   sync.Once
	browserCtx    context.Context
	browserStop   func()
	browserErr    error
	browserDataTo string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if browserStop != nil {
		browserStop()
	}
	if browserDataTo != "" {
		_ = os.RemoveAll(browserDataTo)
	}
	os.Exit(code)
}

// chromiumPath finds the browser: $CLOCKD_TEST_CHROMIUM, else chromium on
// PATH.
func chromiumPath() (string, error) {
	if p := os.Getenv("CLOCKD_TEST_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("chromium not found on PATH (install it: apt-get install -y chromium; or set CLOCKD_TEST_CHROMIUM)")
}

// browser returns the context of the shared headless chromium.
func browser(t *testing.T) context.Context {
	t.Helper()
	browserOnce.Do(func() {
		path, err := chromiumPath()
		if err != nil {
			browserErr = err
			return
		}
		dir, err := os.MkdirTemp("", "clockd-chromium-")
		if err != nil {
			browserErr = err
			return
		}
		browserDataTo = dir
		opts := []chromedp.ExecAllocatorOption{
			chromedp.ExecPath(path),
			chromedp.Flag("headless", true),
			chromedp.Flag("no-sandbox", true), // the tests run as root
			chromedp.Flag("disable-gpu", true),
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("no-first-run", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.UserDataDir(dir),
			chromedp.WindowSize(1280, 900),
		}
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, bcancel := chromedp.NewContext(actx)
		// Start the browser now, so that a broken install fails here with
		// its error. (The first Run's context owns the browser: no timeout
		// on it, or the browser would close with it.)
		if err := chromedp.Do(bctx); err != nil {
			browserErr = fmt.Errorf("start chromium %s: %w", path, err)
		}
		browserCtx = bctx
		browserStop = func() { bcancel(); acancel() }
	})
	if browserErr != nil {
		t.Fatal(browserErr)
	}
	return browserCtx
}

// tab opens a new tab (its own cookies are the browser's: tests that need
// a clean session clear them) bounded by limit.
func tab(t *testing.T, limit time.Duration) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser(t))
	t.Cleanup(cancel)
	ctx, cancel2 := context.WithTimeout(ctx, limit)
	t.Cleanup(cancel2)
	return ctx
}

// screenshot saves a full-page PNG of the tab under
// $CLOCKD_SCREENSHOTS (the README's pictures come from there), else in
// the test's temporary directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("CLOCKD_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
	}
}

// do runs browser steps and fails the test on the first error.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// text is the text of the first element the selector finds.
func text[S chromedp.Selectable](t *testing.T, ctx context.Context, sel S) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		t.Fatalf("text of %v: %v", sel, err)
	}
	return s
}

// title is the page's title.
func title(t *testing.T, ctx context.Context) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatalf("title: %v", err)
	}
	return s
}
