// Package uibrowser tests `podnet ui`'s page (package flowui) in a real
// browser: Debian's chromium, headless, driven through the DevTools
// protocol by chromedp, against a test agent with known flows on
// 127.0.0.1. It lives in the test/k8s module so that podnet's own module
// does not depend on chromedp. The package has no code of its own.
package uibrowser
