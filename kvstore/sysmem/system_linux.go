package sysmem

func systemSensor() Sensor { return Linux{Root: "/"} }
