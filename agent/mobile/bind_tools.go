//go:build tools

package mobile

// gobind (.ci/mobile.sh) generates bindings that import
// golang.org/x/mobile/bind from this module; this import keeps it in go.mod.
// The file is never built into a binary.
import _ "golang.org/x/mobile/bind"
