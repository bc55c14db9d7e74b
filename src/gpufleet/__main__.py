from gpufleet.cli import main

main()
