// Command hello prints hello: the command TestBinary builds.
package main

import "fmt"

func main() { fmt.Println("hello") }
