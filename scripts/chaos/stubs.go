package main

const whatConcurrent, whatHostile, whatLegacy = "", "", ""

func runConcurrent(r *rig, sz sizes) {}
func runHostile(r *rig, sz sizes)    {}
func runLegacy(r *rig, sz sizes)     {}
