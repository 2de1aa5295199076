from sm120patch.cli import main

main()
