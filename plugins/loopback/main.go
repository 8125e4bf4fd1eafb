package main

func main() {
	plugin().Main()
}
