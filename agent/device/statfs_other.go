//go:build !unix

package device

func freeStorage(string) (int64, bool) { return 0, false }
