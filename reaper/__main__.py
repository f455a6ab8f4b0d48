from reaper.cli import main

main()
